//! The NAT session log as JSON lines, one [`Record`] a line, rotated by size:
//! `PATH` is written, and when it would pass `max_bytes` it becomes `PATH.1`
//! (`PATH.1` becomes `PATH.2`, ... up to `keep`, the oldest dropped), as
//! logrotate numbers files. Reading takes the rotated files oldest first.

use std::{
    fs::{self, File, OpenOptions},
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
};

use super::record::Record;
use ebpf_masq_core::error::{code, Error, Result};

fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

fn io_err(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::new(code::IO_FAILURE, format!("natLog file {}: {what}: {e}", path.display()))
}

/// An open log, appending.
pub struct JsonLog {
    path: PathBuf,
    max_bytes: u64,
    keep: u32,
    file: File,
    size: u64,
}

impl JsonLog {
    pub fn open(path: &Path, max_bytes: u64, keep: u32) -> Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path).map_err(|e| io_err(path, "open", e))?;
        let size = file.metadata().map_err(|e| io_err(path, "stat", e))?.len();
        Ok(Self { path: path.to_owned(), max_bytes, keep, file, size })
    }

    /// Appends the records, rotating first when a line would pass the size.
    pub fn write(&mut self, records: &[Record]) -> Result<()> {
        for r in records {
            let mut line = serde_json::to_string(r).map_err(|e| Error::new(code::IO_FAILURE, format!("natLog record: {e}")))?;
            line.push('\n');
            if self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
                self.rotate()?;
            }
            self.file.write_all(line.as_bytes()).map_err(|e| io_err(&self.path, "write", e))?;
            self.size += line.len() as u64;
        }
        self.file.flush().map_err(|e| io_err(&self.path, "flush", e))
    }

    fn rotate(&mut self) -> Result<()> {
        for n in (1..self.keep).rev() {
            let from = rotated(&self.path, n);
            if from.exists() {
                fs::rename(&from, rotated(&self.path, n + 1)).map_err(|e| io_err(&from, "rotate", e))?;
            }
        }
        if self.keep == 0 {
            fs::remove_file(&self.path).map_err(|e| io_err(&self.path, "rotate", e))?;
        } else {
            fs::rename(&self.path, rotated(&self.path, 1)).map_err(|e| io_err(&self.path, "rotate", e))?;
        }
        *self = Self::open(&self.path, self.max_bytes, self.keep)?;
        Ok(())
    }
}

/// Every record of the log at `path` and its rotated files, oldest file first.
/// A line that is not a record is an error naming the file and line (a log
/// cut short by a crash ends in a partial line: that last line is skipped).
pub fn read_all(path: &Path) -> Result<Vec<Record>> {
    let mut files: Vec<PathBuf> = (1..).map(|n| rotated(path, n)).take_while(|p| p.exists()).collect();
    files.reverse();
    if path.exists() {
        files.push(path.to_owned());
    }
    if files.is_empty() {
        return Err(Error::new(code::IO_FAILURE, format!("natLog file {}: no such file", path.display())));
    }
    let mut out = Vec::new();
    for f in files {
        let lines: Vec<String> = BufReader::new(File::open(&f).map_err(|e| io_err(&f, "open", e))?)
            .lines()
            .collect::<std::io::Result<_>>()
            .map_err(|e| io_err(&f, "read", e))?;
        let last = lines.len();
        for (i, line) in lines.iter().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Record>(line) {
                Ok(r) => out.push(r),
                Err(_) if i + 1 == last && !line.ends_with('}') => {}
                Err(e) => {
                    return Err(Error::new(code::DECODE_FAILURE, format!("natLog file {}:{}: not a record: {e}", f.display(), i + 1)))
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::natlog::record::Event;

    fn rec(t: u64) -> Record {
        Record {
            time_ms: t,
            event: Event::Create,
            proto: 6,
            pod_addr: "10.1.0.5".parse().unwrap(),
            pod_port: 40000,
            nat_addr: Some("192.0.2.1".parse().unwrap()),
            nat_port: Some(40000),
            remote_addr: "203.0.113.10".parse().unwrap(),
            remote_port: 443,
            start_ms: None,
            namespace: None,
            pod: None,
            policy: None,
            reason: None,
            counts: None,
        }
    }

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ebpf-masq-natlog-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn rotates_by_size_keeps_the_newest_files_and_reads_them_in_order() {
        let d = tmpdir("rotate");
        let p = d.join("nat.log");
        let line = serde_json::to_string(&rec(0)).unwrap().len() as u64 + 1;
        let mut log = JsonLog::open(&p, line * 3, 2).unwrap();
        for t in 0..10 {
            log.write(&[rec(t)]).unwrap();
        }
        // 10 records, 3 a file: nat.log holds 9, .1 6-8, .2 3-5; 0-2 were dropped.
        assert!(!rotated(&p, 3).exists());
        let times: Vec<u64> = read_all(&p).unwrap().iter().map(|r| r.time_ms).collect();
        assert_eq!(times, (3..10).collect::<Vec<_>>());
        // Reopened, it appends where it stopped.
        drop(log);
        JsonLog::open(&p, line * 3, 2).unwrap().write(&[rec(10)]).unwrap();
        assert_eq!(read_all(&p).unwrap().last().unwrap().time_ms, 10);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_bad_line_is_named_and_a_cut_last_line_skipped() {
        let d = tmpdir("bad");
        let p = d.join("nat.log");
        let good = serde_json::to_string(&rec(1)).unwrap();
        fs::write(&p, format!("{good}\n{}", &good[..20])).unwrap();
        assert_eq!(read_all(&p).unwrap().len(), 1);
        fs::write(&p, format!("{good}\n{{\"time_ms\": 1}}\n{good}\n")).unwrap();
        let e = read_all(&p).unwrap_err().to_string();
        assert!(e.contains("nat.log:2: not a record"), "{e}");
        let e = read_all(&d.join("none.log")).unwrap_err().to_string();
        assert!(e.contains("no such file"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }
}
