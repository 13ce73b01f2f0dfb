//! Following the plugin's event stream while pytest appends to it: complete lines only, a
//! partial last line kept for the next read.

use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::error::{Error, Result};
use crate::pytest::events::Event;

/// Reads every event of a finished stream.
pub(crate) fn read_events(path: &Path) -> Result<Vec<Event>> {
    EventReader::open(path)?.read_all()
}

/// The most lines one read of a stream still being written takes: its reader looks at the
/// clocks between reads, however fast the process writes.
const BATCH: usize = 4096;

/// Reads complete lines appended to the events file since the last call.
pub(crate) struct EventReader {
    file: BufReader<std::fs::File>,
    partial: String,
    /// Whether the last read reached the end of what was written.
    drained: bool,
}

impl EventReader {
    pub(crate) fn open(path: &Path) -> Result<EventReader> {
        let file = std::fs::File::open(path).map_err(|e| Error::io("open", path, e))?;
        Ok(EventReader {
            file: BufReader::new(file),
            partial: String::new(),
            drained: false,
        })
    }

    /// The events of the lines completed since the last call, at most [`BATCH`] lines; a line
    /// still being written waits.
    pub(crate) fn read_new(&mut self) -> Result<Vec<Event>> {
        self.read(BATCH)
    }

    /// The events of every line completed since the last call (a finished stream's rest).
    pub(crate) fn read_all(&mut self) -> Result<Vec<Event>> {
        self.read(usize::MAX)
    }

    /// Whether the last read reached the end of what was written (a line still being
    /// written included): a finished stream's reader is then done.
    pub(crate) fn drained(&self) -> bool {
        self.drained
    }

    fn read(&mut self, most: usize) -> Result<Vec<Event>> {
        let mut out = Vec::new();
        self.drained = false;
        for _ in 0..most {
            let mut line = String::new();
            let n = self
                .file
                .read_line(&mut line)
                .map_err(|e| Error::Infra(format!("failed to read the plugin's events: {e}")))?;
            if n == 0 {
                self.drained = true;
                break;
            }
            if !line.ends_with('\n') {
                // A line the plugin is still writing: keep it for the next call.
                self.partial.push_str(&line);
                self.drained = true;
                break;
            }
            let full = std::mem::take(&mut self.partial) + &line;
            if let Some(ev) = Event::parse(full.trim_end()) {
                out.push(ev);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_line_still_being_written_is_read_once_it_is_complete() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut w = std::fs::File::create(&path).unwrap();
        let mut r = EventReader::open(&path).unwrap();
        w.write_all(b"{\"event\":\"test_start\",\"nodeid\":\"t.py::a\"}\n{\"event\":\"test_st")
            .unwrap();
        let first = r.read_new().unwrap();
        assert!(
            matches!(&first[..], [Event::TestStart { nodeid }] if nodeid == "t.py::a"),
            "{first:?}"
        );
        assert!(r.read_new().unwrap().is_empty(), "half a line is no event");
        assert!(r.drained(), "the rest is being written");
        w.write_all(b"art\",\"nodeid\":\"t.py::b\"}\nnot json\n")
            .unwrap();
        let second = r.read_new().unwrap();
        assert!(
            matches!(&second[..], [Event::TestStart { nodeid }] if nodeid == "t.py::b"),
            "{second:?}"
        );
        assert_eq!(read_events(&path).unwrap().len(), 2);
    }

    #[test]
    fn a_long_stream_is_read_a_batch_at_a_time_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let line = "{\"event\":\"test_start\",\"nodeid\":\"t.py::a\"}\n";
        std::fs::write(&path, line.repeat(BATCH + 1)).unwrap();
        let mut r = EventReader::open(&path).unwrap();
        assert_eq!(r.read_new().unwrap().len(), BATCH);
        assert!(!r.drained());
        assert_eq!(r.read_new().unwrap().len(), 1);
        assert!(r.drained());
    }
}
