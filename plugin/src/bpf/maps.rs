//! Typed handles on the pinned maps, opened by path (no object load needed).

use aya::maps::{Map, MapData, MapError};

use super::loader::Pins;
use crate::error::{Error, Result};

/// Open the pinned map `name` as the typed view `T` (HashMap, LpmTrie, Array...).
pub fn open<T>(pins: &Pins, name: &str) -> Result<T>
where
    T: TryFrom<Map, Error = MapError>,
{
    let path = pins.map(name);
    let data = MapData::from_pin(&path).map_err(|e| {
        Error::bpf(format!("open pinned map {}: {e} (is the node set up? run `ebpf-masq apply`)", path.display()))
    })?;
    let map = Map::from_map_data(data).map_err(|e| Error::bpf(format!("map {name}: {e}")))?;
    T::try_from(map).map_err(|e| Error::bpf(format!("map {name}: {e}")))
}

/// True for the error a map returns when a key is absent.
pub fn is_key_not_found(e: &MapError) -> bool {
    matches!(e, MapError::KeyNotFound)
}

