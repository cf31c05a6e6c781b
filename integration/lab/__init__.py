"""The labs the integration tests (and scripts/bench/newflow.py) build on: topologies in
throw-away network namespaces, the peer tool run inside them, and how the tests call the
plugin and read its maps. integration/README.md says which module holds what."""
