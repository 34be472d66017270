//! The CRI log format (`<RFC3339Nano time> <stdout|stderr> <P|F> <message>`), read back into
//! lines as the kubelet's log reader does: partial (`P`) chunks are joined with the chunks that
//! follow them up to the full (`F`) one.

/// One CRI log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub time: &'a str,
    pub stream: &'a str,
    pub partial: bool,
    pub message: &'a str,
}

/// Parses one line (without its newline); `None` for a line that is not a CRI record.
pub fn parse(line: &str) -> Option<Record<'_>> {
    let mut parts = line.splitn(4, ' ');
    let time = parts.next()?;
    let stream = parts.next()?;
    let tag = parts.next()?;
    let message = parts.next().unwrap_or("");
    if !matches!(stream, "stdout" | "stderr") || time.is_empty() {
        return None;
    }
    let partial = tag.split(':').any(|t| t == "P");
    Some(Record {
        time,
        stream,
        partial,
        message,
    })
}

/// A whole log line: the time of its first chunk and its text (without the newline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub time: String,
    pub text: String,
}

impl Line {
    /// As `kubectl logs` prints it (with `--timestamps`, the time first).
    pub fn render(&self, timestamps: bool) -> String {
        if timestamps {
            format!("{} {}\n", self.time, self.text)
        } else {
            format!("{}\n", self.text)
        }
    }
}

/// Joins partial records into lines, one stream at a time (stdout and stderr chunks of one
/// line may interleave).
#[derive(Debug, Default)]
pub struct Assembler {
    pending: Vec<(String, Line)>,
}

impl Assembler {
    /// Feeds one raw line of the file; returns a finished line, if this completed one.
    pub fn push(&mut self, raw: &str) -> Option<Line> {
        let r = parse(raw)?;
        let at = self.pending.iter().position(|(s, _)| s == r.stream);
        let mut line = match at {
            Some(i) => self.pending.remove(i).1,
            None => Line {
                time: r.time.to_string(),
                text: String::new(),
            },
        };
        line.text.push_str(r.message);
        if r.partial {
            self.pending.push((r.stream.to_string(), line));
            None
        } else {
            Some(line)
        }
    }

    /// What is left unfinished (a container that died mid-line), as lines.
    pub fn finish(&mut self) -> Vec<Line> {
        self.pending.drain(..).map(|(_, l)| l).collect()
    }
}

/// All lines of a whole log file's text, the last `tail` of them when given.
pub fn lines(text: &str, tail: Option<usize>) -> Vec<Line> {
    let mut a = Assembler::default();
    let mut out: Vec<Line> = text.lines().filter_map(|l| a.push(l)).collect();
    out.extend(a.finish());
    if let Some(n) = tail {
        let skip = out.len().saturating_sub(n);
        out.drain(..skip);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_records() {
        let r = parse("2016-10-06T00:17:09.669794202Z stdout F hello world").unwrap();
        assert_eq!(
            r,
            Record {
                time: "2016-10-06T00:17:09.669794202Z",
                stream: "stdout",
                partial: false,
                message: "hello world"
            }
        );
        assert!(parse("2016-10-06T00:17:09Z stderr P part").unwrap().partial);
        assert_eq!(parse("2016-10-06T00:17:09Z stdout F").unwrap().message, "");
        assert!(parse("garbage").is_none());
        assert!(parse("t other F x").is_none());
    }

    #[test]
    fn joins_partials_per_stream_and_tails() {
        let text = "t1 stdout P hel\nt2 stderr F oops\nt3 stdout P lo \nt4 stdout F world\nt5 stdout F last\n";
        let all = lines(text, None);
        let texts: Vec<&str> = all.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts, ["oops", "hello world", "last"]);
        assert_eq!(all[1].time, "t1");
        assert_eq!(all[1].render(true), "t1 hello world\n");
        assert_eq!(all[2].render(false), "last\n");
        let tail = lines(text, Some(1));
        assert_eq!(tail.len(), 1);
        assert_eq!(tail[0].text, "last");
        assert_eq!(lines(text, Some(0)).len(), 0);
    }

    #[test]
    fn an_unfinished_line_is_kept() {
        let all = lines("t1 stdout P no newline", None);
        assert_eq!(all[0].text, "no newline");
    }
}
