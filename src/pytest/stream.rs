//! Following the plugin's event stream while pytest appends to it: complete lines only, a
//! partial last line kept for the next read.

use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::error::{Error, Result};
use crate::pytest::events::Event;

/// Reads every event of a finished stream, and what of it was dropped ([`EventReader::dropped`]).
pub(crate) fn read_events(path: &Path) -> Result<(Vec<Event>, Option<String>)> {
    let mut reader = EventReader::open(path)?;
    let events = reader.read_all()?;
    Ok((events, reader.dropped()))
}

/// The most lines one read of a stream still being written takes: its reader looks at the
/// clocks between reads, however fast the process writes.
const BATCH: usize = 4096;

/// The longest line kept. No line the plugin writes comes near it (the collection of a
/// 200,000-test suite is about 50 MB); a longer one is the process's own doing, and is dropped
/// as it is read, never held whole.
const MAX_LINE: usize = 64 << 20;

/// The most bytes of one stream read. The file is bounded only by the run's disk limit (up to
/// 16 GiB), and the process under audit can write it: past this, the rest is dropped and the
/// stream reads as ended.
const MAX_STREAM: u64 = 1 << 30;

/// Reads complete lines appended to the events file since the last call.
pub(crate) struct EventReader {
    file: BufReader<std::fs::File>,
    /// The line being read, while it is not complete.
    partial: Vec<u8>,
    /// The line being read is longer than `max_line`: its bytes are dropped up to its end.
    skipping: bool,
    /// Bytes read so far.
    read: u64,
    /// Whether the last read reached the end of what was written.
    drained: bool,
    max_line: usize,
    max_stream: u64,
    /// Lines dropped for their length.
    long_lines: u64,
    /// Whether the stream was cut at `max_stream`.
    cut: bool,
}

impl EventReader {
    pub(crate) fn open(path: &Path) -> Result<EventReader> {
        EventReader::with_limits(path, MAX_LINE, MAX_STREAM)
    }

    fn with_limits(path: &Path, max_line: usize, max_stream: u64) -> Result<EventReader> {
        let file = std::fs::File::open(path).map_err(|e| Error::io("open", path, e))?;
        Ok(EventReader {
            file: BufReader::with_capacity(1 << 16, file),
            partial: Vec::new(),
            skipping: false,
            read: 0,
            drained: false,
            max_line,
            max_stream,
            long_lines: 0,
            cut: false,
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

    /// What the reader dropped, in words, if anything: lines too long, the stream's end past
    /// its bound. The process wrote what the plugin does not: what it reported is incomplete.
    pub(crate) fn dropped(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.long_lines > 0 {
            parts.push(format!(
                "{} line(s) longer than {} MiB",
                self.long_lines,
                self.max_line >> 20
            ));
        }
        if self.cut {
            parts.push(format!("everything past {} MiB", self.max_stream >> 20));
        }
        (!parts.is_empty()).then(|| {
            format!(
                "its event stream was cut ({}: no line the plugin writes is that long)",
                parts.join(", ")
            )
        })
    }

    fn read(&mut self, most: usize) -> Result<Vec<Event>> {
        let mut out = Vec::new();
        self.drained = false;
        let mut lines = 0;
        while lines < most {
            if self.read >= self.max_stream {
                self.cut = true;
                self.drained = true;
                break;
            }
            let buf = self
                .file
                .fill_buf()
                .map_err(|e| Error::Infra(format!("failed to read the plugin's events: {e}")))?;
            if buf.is_empty() {
                // The end of what was written; a line still being written waits in `partial`.
                self.drained = true;
                break;
            }
            let room = buf.len().min((self.max_stream - self.read) as usize);
            let (chunk, ends) = match buf[..room].iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..=i], true),
                None => (&buf[..room], false),
            };
            let n = chunk.len();
            if !self.skipping {
                if self.partial.len() + n > self.max_line {
                    self.skipping = true;
                    self.long_lines += 1;
                    self.partial = Vec::new();
                } else {
                    self.partial.extend_from_slice(chunk);
                }
            }
            self.file.consume(n);
            self.read += n as u64;
            if !ends {
                continue;
            }
            lines += 1;
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            let line = std::mem::take(&mut self.partial);
            if let Some(ev) = Event::parse(String::from_utf8_lossy(&line).trim_end()) {
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
        assert_eq!(read_events(&path).unwrap().0.len(), 2);
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

    #[test]
    fn a_line_longer_than_its_bound_is_dropped_as_it_is_read_and_the_next_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut w = std::fs::File::create(&path).unwrap();
        let mut r = EventReader::with_limits(&path, 64, 1 << 20).unwrap();
        let line = b"{\"event\":\"test_start\",\"nodeid\":\"t.py::a\"}\n";
        w.write_all(line).unwrap();
        w.write_all(&[b'x'; 150]).unwrap();
        assert_eq!(r.read_new().unwrap().len(), 1);
        assert!(
            r.partial.len() <= 64,
            "a long line is not held: {}",
            r.partial.len()
        );
        w.write_all(&[b'x'; 150]).unwrap();
        w.write_all(b"\n\xff\xfe not utf-8\n").unwrap();
        w.write_all(line).unwrap();
        assert_eq!(
            r.read_new().unwrap().len(),
            1,
            "the line after the long one is read"
        );
        assert!(r.partial.capacity() <= 64, "{}", r.partial.capacity());
        let why = r.dropped().unwrap();
        assert!(why.contains("1 line(s) longer than"), "{why}");
    }

    #[test]
    fn a_stream_past_its_bound_is_cut_and_reads_as_ended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let line = "{\"event\":\"test_start\",\"nodeid\":\"t.py::a\"}\n";
        std::fs::write(&path, line.repeat(3)).unwrap();
        let mut r = EventReader::with_limits(&path, 1 << 10, 2 * line.len() as u64 + 5).unwrap();
        assert_eq!(r.read_all().unwrap().len(), 2);
        assert!(r.drained());
        assert!(r.read_new().unwrap().is_empty());
        assert!(r.dropped().unwrap().contains("everything past"));
        let mut whole = EventReader::open(&path).unwrap();
        assert_eq!(whole.read_all().unwrap().len(), 3);
        assert_eq!(whole.dropped(), None);
    }
}
