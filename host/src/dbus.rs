//! Just enough of D-Bus to talk to systemd: the wire format (little-endian marshalling of the
//! basic types, arrays, structs and variants), one connection over a unix socket with the
//! EXTERNAL authentication, method calls and their replies, and the signals that arrive
//! meanwhile. [`crate::systemd`] uses it on systemd's private socket.
//!
//! Why our own: the daemon and every shim link this crate, the shim statically and measured
//! by its resident memory; a general D-Bus library (and its async runtime) would be most of
//! a shim's code for four method calls.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// A D-Bus value, typed as its signature says.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Byte(u8),
    Bool(bool),
    I32(i32),
    U32(u32),
    U64(u64),
    Str(String),
    ObjectPath(String),
    Signature(String),
    /// An array of elements of signature `.0` (given, so that an empty array is typed too).
    Array(String, Vec<Value>),
    Struct(Vec<Value>),
    Variant(Box<Value>),
}

impl Value {
    /// The value's type signature.
    pub fn signature(&self) -> String {
        match self {
            Value::Byte(_) => "y".into(),
            Value::Bool(_) => "b".into(),
            Value::I32(_) => "i".into(),
            Value::U32(_) => "u".into(),
            Value::U64(_) => "t".into(),
            Value::Str(_) => "s".into(),
            Value::ObjectPath(_) => "o".into(),
            Value::Signature(_) => "g".into(),
            Value::Array(elem, _) => format!("a{elem}"),
            Value::Struct(fields) => {
                format!(
                    "({})",
                    fields.iter().map(Value::signature).collect::<String>()
                )
            }
            Value::Variant(_) => "v".into(),
        }
    }

    /// `(name, variant)`: one property of systemd's `a(sv)` lists.
    pub fn property(name: &str, value: Value) -> Value {
        Value::Struct(vec![
            Value::Str(name.into()),
            Value::Variant(Box::new(value)),
        ])
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) | Value::ObjectPath(s) | Value::Signature(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_u32(&self) -> Option<u32> {
        match self {
            Value::U32(n) => Some(*n),
            _ => None,
        }
    }
}

fn alignment(sig: u8) -> usize {
    match sig {
        b'y' | b'g' | b'v' => 1,
        b'b' | b'i' | b'u' | b's' | b'o' | b'a' => 4,
        b't' | b'x' | b'd' | b'(' | b'{' => 8,
        _ => 1,
    }
}

fn pad(buf: &mut Vec<u8>, align: usize) {
    while !buf.len().is_multiple_of(align) {
        buf.push(0);
    }
}

/// Appends `v` to `buf`, whose start is 8-aligned in the message (a body, a header).
pub fn marshal(buf: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Byte(b) => buf.push(*b),
        Value::Bool(b) => {
            pad(buf, 4);
            buf.extend_from_slice(&u32::from(*b).to_le_bytes());
        }
        Value::I32(n) => {
            pad(buf, 4);
            buf.extend_from_slice(&n.to_le_bytes());
        }
        Value::U32(n) => {
            pad(buf, 4);
            buf.extend_from_slice(&n.to_le_bytes());
        }
        Value::U64(n) => {
            pad(buf, 8);
            buf.extend_from_slice(&n.to_le_bytes());
        }
        Value::Str(s) | Value::ObjectPath(s) => {
            pad(buf, 4);
            buf.extend_from_slice(&(s.len() as u32).to_le_bytes());
            buf.extend_from_slice(s.as_bytes());
            buf.push(0);
        }
        Value::Signature(s) => {
            buf.push(s.len() as u8);
            buf.extend_from_slice(s.as_bytes());
            buf.push(0);
        }
        Value::Array(elem, items) => {
            pad(buf, 4);
            let len_at = buf.len();
            buf.extend_from_slice(&[0; 4]);
            // The padding to the first element is not part of the length, even when empty.
            pad(
                buf,
                alignment(elem.as_bytes().first().copied().unwrap_or(b'y')),
            );
            let start = buf.len();
            for item in items {
                marshal(buf, item);
            }
            let len = (buf.len() - start) as u32;
            buf[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
        }
        Value::Struct(fields) => {
            pad(buf, 8);
            for f in fields {
                marshal(buf, f);
            }
        }
        Value::Variant(inner) => {
            marshal(buf, &Value::Signature(inner.signature()));
            marshal(buf, inner);
        }
    }
}

fn bad(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("D-Bus: {what}"))
}

/// Reads values of a signature from a buffer whose start is 8-aligned in the message.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn align(&mut self, a: usize) -> io::Result<()> {
        let to = self.pos.div_ceil(a) * a;
        if to > self.buf.len() {
            return Err(bad("truncated message"));
        }
        self.pos = to;
        Ok(())
    }

    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or_else(|| bad("length overflow"))?;
        let s = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| bad("truncated message"))?;
        self.pos = end;
        Ok(s)
    }

    fn u32(&mut self) -> io::Result<u32> {
        self.align(4)?;
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn string(&mut self, len: usize) -> io::Result<String> {
        let s = self.take(len)?;
        let text = std::str::from_utf8(s).map_err(|_| bad("a string that is not UTF-8"))?;
        self.take(1)?; // its NUL
        Ok(text.to_string())
    }

    /// One complete type at the start of `sig`; returns it and the rest of `sig`.
    fn value<'s>(&mut self, sig: &'s str, depth: usize) -> io::Result<(Value, &'s str)> {
        if depth > 32 {
            return Err(bad("nesting too deep"));
        }
        let c = *sig
            .as_bytes()
            .first()
            .ok_or_else(|| bad("empty signature"))?;
        let rest = &sig[1..];
        let v = match c {
            b'y' => Value::Byte(self.take(1)?[0]),
            b'b' => Value::Bool(self.u32()? != 0),
            b'i' => Value::I32(self.u32()? as i32),
            b'u' => Value::U32(self.u32()?),
            b't' | b'x' => {
                self.align(8)?;
                let b = self.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Value::U64(u64::from_le_bytes(a))
            }
            b's' | b'o' => {
                let len = self.u32()? as usize;
                let s = self.string(len)?;
                if c == b's' {
                    Value::Str(s)
                } else {
                    Value::ObjectPath(s)
                }
            }
            b'g' => {
                let len = self.take(1)?[0] as usize;
                Value::Signature(self.string(len)?)
            }
            b'v' => {
                let len = self.take(1)?[0] as usize;
                let inner_sig = self.string(len)?;
                let (inner, left) = self.value(&inner_sig, depth + 1)?;
                if !left.is_empty() {
                    return Err(bad("a variant of more than one type"));
                }
                Value::Variant(Box::new(inner))
            }
            b'a' => {
                let elem_len = single_type_len(rest)?;
                let elem = &rest[..elem_len];
                let len = self.u32()? as usize;
                self.align(alignment(elem.as_bytes()[0]))?;
                let end = self
                    .pos
                    .checked_add(len)
                    .ok_or_else(|| bad("length overflow"))?;
                if end > self.buf.len() {
                    return Err(bad("truncated array"));
                }
                let mut items = Vec::new();
                while self.pos < end {
                    let (item, _) = self.value(elem, depth + 1)?;
                    items.push(item);
                }
                return Ok((Value::Array(elem.to_string(), items), &rest[elem_len..]));
            }
            b'(' | b'{' => {
                self.align(8)?;
                let close = if c == b'(' { ')' } else { '}' };
                let inner_len = single_type_len(sig)? - 2;
                let mut inner = &sig[1..1 + inner_len];
                let mut fields = Vec::new();
                while !inner.is_empty() {
                    let (f, left) = self.value(inner, depth + 1)?;
                    fields.push(f);
                    inner = left;
                }
                debug_assert_eq!(sig.as_bytes()[1 + inner_len] as char, close);
                return Ok((Value::Struct(fields), &sig[inner_len + 2..]));
            }
            other => return Err(bad(format!("unsupported type {:?}", other as char))),
        };
        Ok((v, rest))
    }
}

/// The length of the single complete type at the start of `sig`.
fn single_type_len(sig: &str) -> io::Result<usize> {
    let b = sig.as_bytes();
    match b.first() {
        None => Err(bad("empty signature")),
        Some(b'a') => Ok(1 + single_type_len(&sig[1..])?),
        Some(&open @ (b'(' | b'{')) => {
            let close = if open == b'(' { b')' } else { b'}' };
            let mut depth = 0;
            for (i, &c) in b.iter().enumerate() {
                if c == b'(' || c == b'{' {
                    depth += 1;
                } else if c == b')' || c == b'}' {
                    depth -= 1;
                    if depth == 0 {
                        if c != close {
                            return Err(bad("mismatched brackets in a signature"));
                        }
                        return Ok(i + 1);
                    }
                }
            }
            Err(bad("unclosed bracket in a signature"))
        }
        Some(_) => Ok(1),
    }
}

/// Parses `body` as the values of `sig`.
pub fn unmarshal(body: &[u8], sig: &str) -> io::Result<Vec<Value>> {
    let mut r = Reader { buf: body, pos: 0 };
    let mut rest = sig;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (v, left) = r.value(rest, 0)?;
        out.push(v);
        rest = left;
    }
    Ok(out)
}

/// Message types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    MethodCall = 1,
    MethodReturn = 2,
    Error = 3,
    Signal = 4,
}

/// A received message: its kind, the header fields we use, and its body's values.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub kind: Kind,
    pub serial: u32,
    pub reply_serial: Option<u32>,
    pub path: Option<String>,
    pub interface: Option<String>,
    pub member: Option<String>,
    pub error_name: Option<String>,
    pub body: Vec<Value>,
}

/// The bytes of a method call (header and body), serial `serial`.
pub fn method_call(
    serial: u32,
    destination: &str,
    path: &str,
    interface: &str,
    member: &str,
    args: &[Value],
) -> Vec<u8> {
    let mut body = Vec::new();
    for a in args {
        marshal(&mut body, a);
    }
    let sig: String = args.iter().map(Value::signature).collect();
    let field =
        |code: u8, v: Value| Value::Struct(vec![Value::Byte(code), Value::Variant(Box::new(v))]);
    let mut fields = vec![
        field(1, Value::ObjectPath(path.into())),
        field(2, Value::Str(interface.into())),
        field(3, Value::Str(member.into())),
        field(6, Value::Str(destination.into())),
    ];
    if !sig.is_empty() {
        fields.push(field(8, Value::Signature(sig)));
    }
    let mut msg = vec![b'l', Kind::MethodCall as u8, 0, 1];
    msg.extend_from_slice(&(body.len() as u32).to_le_bytes());
    msg.extend_from_slice(&serial.to_le_bytes());
    marshal(&mut msg, &Value::Array("(yv)".into(), fields));
    pad(&mut msg, 8);
    msg.extend_from_slice(&body);
    msg
}

/// The largest message we accept (systemd's replies to us are a few hundred bytes).
const MAX_MESSAGE: usize = 1 << 20;

/// Parses one whole message (`bytes` is exactly its length: [`message_len`]).
pub fn parse_message(bytes: &[u8]) -> io::Result<Message> {
    if bytes.len() < 16 || bytes[0] != b'l' {
        return Err(bad("not a little-endian message"));
    }
    let kind = match bytes[1] {
        1 => Kind::MethodCall,
        2 => Kind::MethodReturn,
        3 => Kind::Error,
        4 => Kind::Signal,
        t => return Err(bad(format!("message type {t}"))),
    };
    let body_len = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize;
    let serial = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    let mut r = Reader {
        buf: bytes,
        pos: 12,
    };
    let (fields, _) = r.value("a(yv)", 0)?;
    r.align(8)?;
    let body_start = r.pos;
    if bytes.len() != body_start + body_len {
        return Err(bad("length does not match"));
    }
    let mut m = Message {
        kind,
        serial,
        reply_serial: None,
        path: None,
        interface: None,
        member: None,
        error_name: None,
        body: Vec::new(),
    };
    let mut sig = String::new();
    if let Value::Array(_, items) = fields {
        for item in items {
            let Value::Struct(f) = item else { continue };
            let (Some(Value::Byte(code)), Some(Value::Variant(v))) = (f.first(), f.get(1)) else {
                continue;
            };
            match code {
                1 => m.path = v.as_str().map(str::to_string),
                2 => m.interface = v.as_str().map(str::to_string),
                3 => m.member = v.as_str().map(str::to_string),
                4 => m.error_name = v.as_str().map(str::to_string),
                5 => m.reply_serial = v.as_u32(),
                8 => sig = v.as_str().unwrap_or_default().to_string(),
                _ => {}
            }
        }
    }
    m.body = unmarshal(&bytes[body_start..], &sig)?;
    Ok(m)
}

/// The whole length of the message whose first 16 bytes are `head`.
pub fn message_len(head: &[u8; 16]) -> io::Result<usize> {
    let body = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
    let fields = u32::from_le_bytes([head[12], head[13], head[14], head[15]]) as usize;
    let len = (16 + fields).div_ceil(8) * 8 + body;
    if len > MAX_MESSAGE {
        return Err(bad(format!("a message of {len} bytes")));
    }
    Ok(len)
}

/// A D-Bus error reply, or the connection's failure.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The peer answered with an error (`org.freedesktop.systemd1.NoSuchUnit`, ...).
    #[error("{name}: {message}")]
    Remote { name: String, message: String },
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// A connection: authenticated, with the signals read while waiting for replies kept.
pub struct Connection {
    stream: UnixStream,
    serial: u32,
    signals: Vec<Message>,
}

impl Connection {
    /// Connects to the bus socket at `path` and authenticates as this process's uid.
    pub fn connect(path: &Path, timeout: Duration) -> io::Result<Connection> {
        let mut stream = UnixStream::connect(path)
            .map_err(|e| io::Error::new(e.kind(), format!("connect {}: {e}", path.display())))?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() }.to_string();
        let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
        stream.write_all(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes())?;
        let line = read_line(&mut stream)?;
        if !line.starts_with("OK ") {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("D-Bus authentication refused: {line}"),
            ));
        }
        stream.write_all(b"BEGIN\r\n")?;
        let mut conn = Connection {
            stream,
            serial: 0,
            signals: Vec::new(),
        };
        conn.settle(Instant::now() + timeout)?;
        Ok(conn)
    }

    /// Waits until the peer answers a Ping. systemd 252 (Debian 12) does not see a message
    /// that reaches it in the same read as the `BEGIN` that ends authentication: it stays in
    /// its buffer until something else wakes the connection (seen: 20 s and more, on an idle
    /// system). So the first message is a Ping, sent again, a little later each time, until
    /// one is answered; each new one is that wake-up.
    fn settle(&mut self, deadline: Instant) -> io::Result<()> {
        let mut pings = Vec::new();
        let mut wait = Duration::from_millis(20);
        loop {
            self.serial += 1;
            pings.push(self.serial);
            self.stream.write_all(&method_call(
                self.serial,
                "org.freedesktop.systemd1",
                "/",
                "org.freedesktop.DBus.Peer",
                "Ping",
                &[],
            ))?;
            let until = (Instant::now() + wait).min(deadline);
            while self.readable_until(until)? {
                let m = self.read_message(deadline)?;
                match m.kind {
                    Kind::Signal => self.signals.push(m),
                    Kind::MethodReturn | Kind::Error
                        if m.reply_serial.is_some_and(|r| pings.contains(&r)) =>
                    {
                        return Ok(());
                    }
                    _ => {}
                }
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "D-Bus: no answer in time",
                ));
            }
            wait = (wait * 2).min(Duration::from_secs(1));
        }
    }

    /// Whether a message starts to arrive before `until` (without reading any of it, so that
    /// a short wait never leaves half a message read).
    fn readable_until(&self, until: Instant) -> io::Result<bool> {
        let left = until.saturating_duration_since(Instant::now());
        let mut fds = [libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd, its length given; poll only writes revents.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            };
        }
        Ok(n > 0)
    }

    /// Calls a method and waits for its reply until `deadline`; signals that arrive
    /// meanwhile are kept for [`Connection::next_signal`].
    pub fn call(
        &mut self,
        destination: &str,
        path: &str,
        interface: &str,
        member: &str,
        args: &[Value],
        deadline: Instant,
    ) -> Result<Vec<Value>, CallError> {
        self.serial = self.serial.wrapping_add(1).max(1);
        let serial = self.serial;
        self.stream.write_all(&method_call(
            serial,
            destination,
            path,
            interface,
            member,
            args,
        ))?;
        loop {
            let m = self.read_message(deadline)?;
            match m.kind {
                Kind::Signal => self.signals.push(m),
                Kind::MethodReturn if m.reply_serial == Some(serial) => return Ok(m.body),
                Kind::Error if m.reply_serial == Some(serial) => {
                    return Err(CallError::Remote {
                        name: m.error_name.unwrap_or_default(),
                        message: m
                            .body
                            .first()
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                    })
                }
                // A reply to an earlier call that timed out, or a call to us: not ours.
                _ => {}
            }
        }
    }

    /// The next signal (kept or newly read) until `deadline`.
    pub fn next_signal(&mut self, deadline: Instant) -> io::Result<Message> {
        if !self.signals.is_empty() {
            return Ok(self.signals.remove(0));
        }
        loop {
            let m = self.read_message(deadline)?;
            if m.kind == Kind::Signal {
                return Ok(m);
            }
        }
    }

    fn read_message(&mut self, deadline: Instant) -> io::Result<Message> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "D-Bus: no answer in time",
            ));
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut head = [0u8; 16];
        self.stream.read_exact(&mut head).map_err(timed_out)?;
        let len = message_len(&head)?;
        let mut bytes = vec![0u8; len];
        bytes[..16].copy_from_slice(&head);
        self.stream
            .read_exact(&mut bytes[16..])
            .map_err(timed_out)?;
        parse_message(&bytes)
    }
}

fn timed_out(e: io::Error) -> io::Error {
    if matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ) {
        io::Error::new(io::ErrorKind::TimedOut, "D-Bus: no answer in time")
    } else {
        e
    }
}

/// One `\r\n`-terminated line of the authentication exchange.
fn read_line(stream: &mut UnixStream) -> io::Result<String> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        if line.len() > 4096 {
            return Err(bad("authentication line too long"));
        }
        stream.read_exact(&mut b).map_err(timed_out)?;
        line.push(b[0]);
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|_| bad("authentication line not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_types_are_aligned_and_little_endian() {
        let mut b = Vec::new();
        marshal(&mut b, &Value::Byte(7));
        marshal(&mut b, &Value::U32(0x01020304));
        marshal(&mut b, &Value::Str("ab".into()));
        marshal(&mut b, &Value::U64(1));
        assert_eq!(
            b,
            [
                7, 0, 0, 0, 4, 3, 2, 1, // byte, padding, u32
                2, 0, 0, 0, b'a', b'b', 0, // string
                0, // to 16
                1, 0, 0, 0, 0, 0, 0, 0 // u64
            ]
        );
    }

    #[test]
    fn an_empty_array_of_structs_pads_to_its_first_element() {
        let mut b = vec![1u8];
        marshal(&mut b, &Value::Array("(sv)".into(), vec![]));
        // byte, pad to 4, length 0, pad to 8 (not counted in the length).
        assert_eq!(b, [1, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn what_is_marshalled_reads_back() {
        let props = Value::Array(
            "(sv)".into(),
            vec![
                Value::property("Description", Value::Str("a pod".into())),
                Value::property("Delegate", Value::Bool(true)),
                Value::property("MemoryMax", Value::U64(1 << 30)),
                Value::property("PIDs", Value::Array("u".into(), vec![Value::U32(42)])),
                Value::property(
                    "AllowedCPUs",
                    Value::Array("y".into(), vec![Value::Byte(3)]),
                ),
            ],
        );
        let args = vec![
            Value::Str("peapod-x.scope".into()),
            Value::Str("fail".into()),
            props,
            Value::Array("(sa(sv))".into(), vec![]),
        ];
        let mut body = Vec::new();
        for a in &args {
            marshal(&mut body, a);
        }
        let sig: String = args.iter().map(Value::signature).collect();
        assert_eq!(sig, "ssa(sv)a(sa(sv))");
        assert_eq!(unmarshal(&body, &sig).unwrap(), args);
    }

    #[test]
    fn a_method_call_parses_as_one() {
        let bytes = method_call(
            9,
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
            "StopUnit",
            &[Value::Str("x.scope".into()), Value::Str("replace".into())],
        );
        let mut head = [0u8; 16];
        head.copy_from_slice(&bytes[..16]);
        assert_eq!(message_len(&head).unwrap(), bytes.len());
        let m = parse_message(&bytes).unwrap();
        assert_eq!(m.kind, Kind::MethodCall);
        assert_eq!(m.serial, 9);
        assert_eq!(m.member.as_deref(), Some("StopUnit"));
        assert_eq!(m.path.as_deref(), Some("/org/freedesktop/systemd1"));
        assert_eq!(
            m.body,
            vec![Value::Str("x.scope".into()), Value::Str("replace".into())]
        );
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        for (body, sig) in [
            (&[1u8, 0, 0][..], "u"),
            (&[255, 255, 255, 255][..], "s"),
            (&[8, 0, 0, 0, 0, 0, 0, 0, 1][..], "at"),
            (&[3, b'a', b'b'][..], "g"),
            (&[][..], "(s"),
            (&[0, 0, 0, 0][..], "q"),
        ] {
            assert!(unmarshal(body, sig).is_err(), "{body:?} as {sig}");
        }
        assert!(parse_message(&[b'B'; 16]).is_err());
        let mut head = [0u8; 16];
        head[4..8].copy_from_slice(&(u32::MAX).to_le_bytes());
        assert!(message_len(&head).is_err());
    }
}
