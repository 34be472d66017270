//! The CRI log format, written by the shim so that logs keep flowing while the daemon is away.
//!
//! One line per chunk: `2016-10-06T00:17:09.669794202Z stdout F text`. A line longer than
//! [`MAX_LINE`] is cut into `P` (partial) lines followed by the `F` line that ends it. Output
//! that ends without a newline (the last line of a stream at EOF) is written as `P`, as
//! CRI-O's conmon does, so that a reader reassembling the stream gets exactly the bytes the
//! container wrote and no newline it never printed.

use peapod_host::timefmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The longest line written as one log entry (containerd's default `max_container_log_line_size`).
pub const MAX_LINE: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
    fn index(self) -> usize {
        match self {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        }
    }
}

/// Appends CRI-format lines to a container's log file.
pub struct CriLog {
    path: PathBuf,
    file: Option<File>,
    /// Bytes of an unfinished line, per stream.
    pending: [Vec<u8>; 2],
    /// Output that could not be written (a full disk): counted, never waited for.
    drops: Drops,
}

/// What a log that cannot be written (ENOSPC, EDQUOT, EIO) dropped since it last could be.
/// A container's output is never held back for its log: its pipe keeps being read, the lines
/// that cannot be written are dropped and counted, the first failure is logged once, and when
/// writing works again (space freed, the file rotated) a record in the log says how much is
/// missing and the shim's log says so too.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Drops {
    pub lines: u64,
    pub bytes: u64,
    /// Dropped over the log's whole life.
    pub total_lines: u64,
    /// A write failed half-way: the file ends in a cut line, to be ended before the next.
    torn: bool,
    error: Option<String>,
}

fn open_log(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
}

/// `write_all`, telling how much was written when it fails.
fn write_counted(file: &mut File, mut data: &[u8]) -> Result<(), (usize, io::Error)> {
    let mut written = 0;
    while !data.is_empty() {
        match file.write(data) {
            Ok(0) => return Err((written, io::ErrorKind::WriteZero.into())),
            Ok(n) => {
                written += n;
                data = &data[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err((written, e)),
        }
    }
    Ok(())
}

impl CriLog {
    pub fn open(path: &Path) -> io::Result<CriLog> {
        Ok(CriLog {
            path: path.to_path_buf(),
            file: Some(open_log(path)?),
            pending: [Vec::new(), Vec::new()],
            drops: Drops::default(),
        })
    }

    /// Opens the path again: after the kubelet renamed the file for rotation, new lines go to
    /// a new file at the original path.
    pub fn reopen(&mut self) -> io::Result<()> {
        self.file = None;
        self.file = Some(open_log(&self.path)?);
        Ok(())
    }

    /// What was dropped since the log last could be written.
    #[cfg(test)]
    pub fn drops(&self) -> &Drops {
        &self.drops
    }

    fn record(stream: Stream, tag: &str, text: &[u8]) -> Vec<u8> {
        let ts = timefmt::rfc3339_nano(timefmt::now_ns());
        let mut line = Vec::with_capacity(ts.len() + text.len() + 12);
        line.extend_from_slice(ts.as_bytes());
        line.push(b' ');
        line.extend_from_slice(stream.name().as_bytes());
        line.push(b' ');
        line.extend_from_slice(tag.as_bytes());
        line.push(b' ');
        line.extend_from_slice(text);
        line.push(b'\n');
        line
    }

    /// Writes one record; a failure drops it (counted) instead of failing the copy.
    fn emit(&mut self, stream: Stream, tag: &str, text: &[u8]) -> io::Result<()> {
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        let mut line = Self::record(stream, tag, text);
        if self.drops.lines > 0 || self.drops.torn {
            // Writable again? First end a line cut by the failure, then say what is missing.
            let mut note = Vec::new();
            if self.drops.torn {
                note.push(b'\n');
            }
            if self.drops.lines > 0 {
                let msg = format!(
                    "peapod: {} lines ({} bytes) of output were dropped: the log could not be written ({})",
                    self.drops.lines,
                    self.drops.bytes,
                    self.drops.error.as_deref().unwrap_or("?")
                );
                note.extend(Self::record(Stream::Stderr, "F", msg.as_bytes()));
            }
            note.extend_from_slice(&line);
            line = note;
        }
        match write_counted(file, &line) {
            Ok(()) => {
                if self.drops.lines > 0 {
                    eprintln!(
                        "peapod-shim: container log {} writable again; {} lines ({} bytes) were dropped",
                        self.path.display(),
                        self.drops.lines,
                        self.drops.bytes
                    );
                }
                self.drops.lines = 0;
                self.drops.bytes = 0;
                self.drops.torn = false;
                self.drops.error = None;
                Ok(())
            }
            Err((written, e)) => {
                if self.drops.lines == 0 {
                    eprintln!(
                        "peapod-shim: cannot write the container log {}: {e}; dropping output (counted) until it can be written",
                        self.path.display()
                    );
                }
                self.drops.torn |= written > 0;
                self.drops.lines += 1;
                self.drops.total_lines += 1;
                self.drops.bytes += text.len() as u64;
                self.drops.error = Some(e.to_string());
                Ok(())
            }
        }
    }

    /// Takes a chunk of output: complete lines are written as `F`, over-long ones as `P` parts,
    /// and the unfinished rest is kept for the next chunk.
    pub fn write(&mut self, stream: Stream, mut data: &[u8]) -> io::Result<()> {
        let i = stream.index();
        while !data.is_empty() {
            match data.iter().position(|&b| b == b'\n') {
                Some(nl) => {
                    let mut line = std::mem::take(&mut self.pending[i]);
                    line.extend_from_slice(&data[..nl]);
                    self.emit_long(stream, &line, true)?;
                    data = &data[nl + 1..];
                }
                None => {
                    self.pending[i].extend_from_slice(data);
                    data = &[];
                    if self.pending[i].len() >= MAX_LINE {
                        let line = std::mem::take(&mut self.pending[i]);
                        let whole = line.len() - line.len() % MAX_LINE;
                        self.emit_long(stream, &line[..whole], false)?;
                        self.pending[i] = line[whole..].to_vec();
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes `line` in pieces of at most MAX_LINE; the last piece is `F` when `complete`.
    fn emit_long(&mut self, stream: Stream, line: &[u8], complete: bool) -> io::Result<()> {
        if line.is_empty() {
            return if complete {
                self.emit(stream, "F", b"")
            } else {
                Ok(())
            };
        }
        let mut chunks = line.chunks(MAX_LINE).peekable();
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            let tag = if last && complete { "F" } else { "P" };
            self.emit(stream, tag, chunk)?;
        }
        Ok(())
    }

    /// The stream ended: what is left of its last line is written as a partial line.
    pub fn finish(&mut self, stream: Stream) -> io::Result<()> {
        let rest = std::mem::take(&mut self.pending[stream.index()]);
        if !rest.is_empty() {
            self.emit(stream, "P", &rest)?;
        }
        if let Some(file) = self.file.as_mut() {
            file.flush()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(path: &Path) -> Vec<(String, String, String)> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| {
                let mut parts = l.splitn(4, ' ');
                let ts = parts.next().unwrap();
                assert_eq!(ts.len(), 30, "timestamp {ts}");
                assert!(ts.ends_with('Z'));
                (
                    parts.next().unwrap().to_string(),
                    parts.next().unwrap().to_string(),
                    parts.next().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    /// A log path in a directory of its own that does not exist yet (the log makes it), removed
    /// with the returned guard however the test ends.
    fn temp_log() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/0.log");
        (dir, path)
    }

    fn t(s: &str, tag: &str, text: &str) -> (String, String, String) {
        (s.into(), tag.into(), text.into())
    }

    #[test]
    fn splits_lines_per_stream_and_keeps_partials() {
        let (_dir, path) = temp_log();
        let mut log = CriLog::open(&path).unwrap();
        log.write(Stream::Stdout, b"hello\nwor").unwrap();
        log.write(Stream::Stderr, b"err one\n").unwrap();
        log.write(Stream::Stdout, b"ld\n\nlast").unwrap();
        log.finish(Stream::Stdout).unwrap();
        log.finish(Stream::Stderr).unwrap();
        assert_eq!(
            lines(&path),
            vec![
                t("stdout", "F", "hello"),
                t("stderr", "F", "err one"),
                t("stdout", "F", "world"),
                t("stdout", "F", ""),
                t("stdout", "P", "last"),
            ]
        );
    }

    #[test]
    fn long_lines_become_partials_then_full() {
        let (_dir, path) = temp_log();
        let mut log = CriLog::open(&path).unwrap();
        let long = vec![b'x'; MAX_LINE * 2 + 10];
        log.write(Stream::Stdout, &long[..MAX_LINE + 5]).unwrap();
        log.write(Stream::Stdout, &long[MAX_LINE + 5..]).unwrap();
        log.write(Stream::Stdout, b"\n").unwrap();
        let got = lines(&path);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].1, "P");
        assert_eq!(got[0].2.len(), MAX_LINE);
        assert_eq!(got[1].1, "P");
        assert_eq!(got[1].2.len(), MAX_LINE);
        assert_eq!(got[2], t("stdout", "F", &"x".repeat(10)));
    }

    #[test]
    fn a_log_that_cannot_be_written_drops_and_counts_and_never_fails_the_copy() {
        // /dev/full answers every write with ENOSPC.
        let mut log = CriLog::open(Path::new("/dev/full")).unwrap();
        log.write(Stream::Stdout, b"one\ntwo\nthree").unwrap();
        log.write(Stream::Stderr, b"four\n").unwrap();
        assert_eq!(log.drops().lines, 3);
        assert_eq!(log.drops().bytes, "one".len() as u64 + 3 + 4);
        // Writable again: the next line comes after a record of what is missing.
        let (_dir, path) = temp_log();
        log.path = path.clone();
        log.reopen().unwrap();
        log.write(Stream::Stdout, b"five\n").unwrap();
        let got = lines(&path);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].0, "stderr");
        assert!(
            got[0]
                .2
                .contains("3 lines (10 bytes) of output were dropped"),
            "{got:?}"
        );
        assert!(got[0].2.contains("No space left on device"), "{got:?}");
        // The unfinished "three" was kept, not dropped: it ends with this line.
        assert_eq!(got[1], t("stdout", "F", "threefive"));
        assert_eq!(log.drops().lines, 0);
        assert_eq!(log.drops().total_lines, 3);
    }

    #[test]
    fn reopen_writes_to_a_new_file_after_rename() {
        let (_dir, path) = temp_log();
        let mut log = CriLog::open(&path).unwrap();
        log.write(Stream::Stdout, b"before\n").unwrap();
        let rotated = path.with_extension("log.1");
        std::fs::rename(&path, &rotated).unwrap();
        log.reopen().unwrap();
        log.write(Stream::Stdout, b"after\n").unwrap();
        assert_eq!(lines(&rotated), vec![t("stdout", "F", "before")]);
        assert_eq!(lines(&path), vec![t("stdout", "F", "after")]);
    }
}
