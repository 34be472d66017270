//! A small, bounded tar reader. We parse tar ourselves rather than through a
//! general-purpose crate so that every allocation driven by the archive
//! (long names, PAX records) has a hard limit, and so that the exact bytes of
//! names and link targets reach the extractor untouched.
//!
//! Understood: ustar/POSIX (with the 155-byte prefix), GNU long names and long
//! link targets (`L`/`K`), PAX extended headers (`x`; `g` is skipped), octal and
//! base-256 numbers. Refused: GNU sparse files and multi-volume archives, which
//! image layers never contain.

use crate::Error;
use std::io::{self, Read};

pub(crate) const BLOCK: usize = 512;

/// Hard limits that a hostile archive cannot push us past.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest single file.
    pub max_entry_size: u64,
    /// Sum of all regular file sizes in one layer.
    pub max_total_size: u64,
    /// Largest PAX header or GNU long name/link record.
    pub max_meta_size: u64,
    /// Most entries in one archive.
    pub max_entries: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_entry_size: 64 << 30,
            max_total_size: 256 << 30,
            max_meta_size: 1 << 20,
            max_entries: 10_000_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    HardLink,
    Symlink,
    Char,
    Block,
    Dir,
    Fifo,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Time {
    pub sec: i64,
    pub nsec: u32,
}

/// An extended attribute from a PAX `SCHILY.xattr.*` record: (name, value).
pub type Xattr = (Vec<u8>, Vec<u8>);

#[derive(Debug, Clone)]
pub struct Header {
    pub kind: Kind,
    /// Raw name bytes, as in the archive (not yet cleaned).
    pub name: Vec<u8>,
    /// Link target for hard and symbolic links.
    pub link: Vec<u8>,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub size: u64,
    pub mtime: Time,
    pub atime: Option<Time>,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub xattrs: Vec<Xattr>,
}

impl Header {
    pub fn display_name(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

/// Counts what is read, so callers can learn where an entry's data starts.
struct Counted<R> {
    inner: R,
    pos: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

pub struct TarReader<R: Read> {
    r: Counted<R>,
    /// Data bytes of the current entry not yet read by the caller.
    remaining: u64,
    /// Padding after the current entry's data.
    padding: u64,
    entries: u64,
    limits: Limits,
    done: bool,
}

#[derive(Default)]
struct Pending {
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    pax: Vec<Xattr>,
}

fn bad(entry: &str, reason: impl Into<String>) -> Error {
    Error::UnsafeLayer {
        entry: entry.to_string(),
        reason: reason.into(),
    }
}

fn padding_for(size: u64) -> u64 {
    (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64
}

impl<R: Read> TarReader<R> {
    pub fn new(r: R, limits: Limits) -> Self {
        TarReader {
            r: Counted { inner: r, pos: 0 },
            remaining: 0,
            padding: 0,
            entries: 0,
            limits,
            done: false,
        }
    }

    /// Bytes consumed from the underlying reader so far: right after
    /// [`TarReader::next_header`], the offset of the entry's data.
    pub fn position(&self) -> u64 {
        self.r.pos
    }

    fn skip(&mut self, n: u64) -> Result<(), Error> {
        let copied = io::copy(&mut (&mut self.r).take(n), &mut io::sink())
            .map_err(|e| Error::io("reading layer archive", e))?;
        if copied != n {
            return Err(truncated());
        }
        Ok(())
    }

    /// Reads the next header, skipping whatever the caller left of the previous entry's data.
    pub fn next_header(&mut self) -> Result<Option<Header>, Error> {
        if self.done {
            return Ok(None);
        }
        let rest = self.remaining + self.padding;
        self.remaining = 0;
        self.padding = 0;
        self.skip(rest)?;

        let mut pending = Pending::default();
        loop {
            let mut block = [0u8; BLOCK];
            let n = read_full(&mut self.r, &mut block)
                .map_err(|e| Error::io("reading layer archive", e))?;
            if n == 0 {
                // No end-of-archive marker: accepted, as Go's archive/tar does.
                self.done = true;
                return Ok(None);
            }
            if n < BLOCK {
                return Err(truncated());
            }
            if block.iter().all(|&b| b == 0) {
                self.done = true;
                return Ok(None);
            }
            self.entries += 1;
            if self.entries > self.limits.max_entries {
                return Err(bad(
                    "",
                    format!("more than {} entries", self.limits.max_entries),
                ));
            }
            verify_checksum(&block)?;
            let typeflag = block[156];
            let mut size = parse_number(&block[124..136], "size")?;

            match typeflag {
                b'L' | b'K' | b'x' | b'g' => {
                    if size > self.limits.max_meta_size {
                        return Err(bad(
                            "",
                            format!(
                                "extended header of {size} bytes exceeds the {} byte limit",
                                self.limits.max_meta_size
                            ),
                        ));
                    }
                    let mut data = vec![0u8; size as usize];
                    if read_full(&mut self.r, &mut data)
                        .map_err(|e| Error::io("reading layer archive", e))?
                        != data.len()
                    {
                        return Err(truncated());
                    }
                    self.skip(padding_for(size))?;
                    match typeflag {
                        b'L' => pending.long_name = Some(trim_nul(&data).to_vec()),
                        b'K' => pending.long_link = Some(trim_nul(&data).to_vec()),
                        b'x' => pending.pax = parse_pax(&data)?,
                        _ => {} // global PAX headers carry nothing we apply
                    }
                    continue;
                }
                _ => {}
            }

            let ustar = &block[257..263] == b"ustar\0";
            let mut name = match pending.long_name.take() {
                Some(n) => n,
                None => {
                    let base = trim_nul(&block[0..100]);
                    let prefix = trim_nul(&block[345..500]);
                    if ustar && !prefix.is_empty() {
                        let mut v = prefix.to_vec();
                        v.push(b'/');
                        v.extend_from_slice(base);
                        v
                    } else {
                        base.to_vec()
                    }
                }
            };
            let mut link = pending
                .long_link
                .take()
                .unwrap_or_else(|| trim_nul(&block[157..257]).to_vec());
            let mode = parse_number(&block[100..108], "mode")? as u32 & 0o7777;
            let mut uid = parse_number(&block[108..116], "uid")?;
            let mut gid = parse_number(&block[116..124], "gid")?;
            let mut mtime = Time {
                sec: parse_number(&block[136..148], "mtime")? as i64,
                nsec: 0,
            };
            let mut atime = None;
            let (dev_major, dev_minor) = if ustar || &block[257..265] == b"ustar  \0" {
                (
                    parse_number(&block[329..337], "devmajor")? as u32,
                    parse_number(&block[337..345], "devminor")? as u32,
                )
            } else {
                (0, 0)
            };
            let mut xattrs = Vec::new();
            for (k, v) in std::mem::take(&mut pending.pax) {
                match k.as_slice() {
                    b"path" => name = v,
                    b"linkpath" => link = v,
                    b"size" => size = parse_decimal(&v, "pax size")?,
                    b"uid" => uid = parse_decimal(&v, "pax uid")?,
                    b"gid" => gid = parse_decimal(&v, "pax gid")?,
                    b"mtime" => mtime = parse_pax_time(&v)?,
                    b"atime" => atime = Some(parse_pax_time(&v)?),
                    k if k.starts_with(b"SCHILY.xattr.") => {
                        xattrs.push((k[b"SCHILY.xattr.".len()..].to_vec(), v));
                    }
                    k if k.starts_with(b"GNU.sparse.") => {
                        return Err(Error::Unsupported(format!(
                            "sparse file {:?} in layer",
                            String::from_utf8_lossy(&name)
                        )));
                    }
                    _ => {}
                }
            }
            let shown = String::from_utf8_lossy(&name).into_owned();
            if size > self.limits.max_entry_size {
                return Err(bad(
                    &shown,
                    format!(
                        "size {size} exceeds the {} byte limit",
                        self.limits.max_entry_size
                    ),
                ));
            }
            let kind = match typeflag {
                b'0' | b'\0' | b'7' => {
                    // Pre-POSIX archives mark directories only by a trailing slash.
                    if typeflag == b'\0' && name.ends_with(b"/") {
                        Kind::Dir
                    } else {
                        Kind::File
                    }
                }
                b'1' => Kind::HardLink,
                b'2' => Kind::Symlink,
                b'3' => Kind::Char,
                b'4' => Kind::Block,
                b'5' => Kind::Dir,
                b'6' => Kind::Fifo,
                b'S' | b'M' => {
                    return Err(Error::Unsupported(format!(
                        "tar entry type {:?} ({shown})",
                        typeflag as char
                    )))
                }
                other => {
                    // Vendor extensions (e.g. 'V' volume labels): skip their data.
                    tracing::debug!(entry = %shown, typeflag = other, "skipping unknown tar entry type");
                    self.skip(size + padding_for(size))?;
                    continue;
                }
            };
            // Only regular files carry data; anything else's size is skipped.
            if kind == Kind::File {
                self.remaining = size;
                self.padding = padding_for(size);
            } else {
                self.remaining = 0;
                self.padding = size + padding_for(size);
            }
            return Ok(Some(Header {
                kind,
                name,
                link,
                mode,
                uid,
                gid,
                size: if kind == Kind::File { size } else { 0 },
                mtime,
                atime,
                dev_major,
                dev_minor,
                xattrs,
            }));
        }
    }

    /// The current regular file's data. Reads past it return EOF.
    pub fn data(&mut self) -> EntryData<'_, R> {
        EntryData { t: self }
    }
}

pub struct EntryData<'a, R: Read> {
    t: &'a mut TarReader<R>,
}

impl<R: Read> Read for EntryData<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.t.remaining == 0 {
            return Ok(0);
        }
        let want = (buf.len() as u64).min(self.t.remaining) as usize;
        let n = self.t.r.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "tar entry data truncated",
            ));
        }
        self.t.remaining -= n as u64;
        Ok(n)
    }
}

fn truncated() -> Error {
    Error::InvalidImage("layer archive is truncated".into())
}

fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn trim_nul(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(i) => &b[..i],
        None => b,
    }
}

fn verify_checksum(block: &[u8; BLOCK]) -> Result<(), Error> {
    let want = parse_number(&block[148..156], "checksum")?;
    let mut unsigned: u64 = 0;
    let mut signed: i64 = 0;
    for (i, &b) in block.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { b };
        unsigned += b as u64;
        signed += b as i8 as i64;
    }
    if want == unsigned || want as i64 == signed {
        Ok(())
    } else {
        Err(Error::InvalidImage("tar header checksum mismatch".into()))
    }
}

/// Octal (NUL/space padded) or GNU base-256 (high bit of the first byte set).
fn parse_number(field: &[u8], what: &str) -> Result<u64, Error> {
    if let Some(&first) = field.first() {
        if first & 0x80 != 0 {
            if first == 0xff {
                return Err(Error::InvalidImage(format!("negative tar {what} field")));
            }
            let mut v: u64 = (first & 0x7f) as u64;
            for &b in &field[1..] {
                v = v
                    .checked_mul(256)
                    .and_then(|v| v.checked_add(b as u64))
                    .ok_or_else(|| Error::InvalidImage(format!("tar {what} field overflows")))?;
            }
            return Ok(v);
        }
    }
    let s: Vec<u8> = field
        .iter()
        .copied()
        .skip_while(|&b| b == b' ' || b == 0)
        .take_while(|&b| b != b' ' && b != 0)
        .collect();
    if s.is_empty() {
        return Ok(0);
    }
    let mut v: u64 = 0;
    for b in s {
        if !(b'0'..=b'7').contains(&b) {
            return Err(Error::InvalidImage(format!(
                "invalid octal in tar {what} field"
            )));
        }
        v = v
            .checked_mul(8)
            .and_then(|v| v.checked_add((b - b'0') as u64))
            .ok_or_else(|| Error::InvalidImage(format!("tar {what} field overflows")))?;
    }
    Ok(v)
}

fn parse_decimal(v: &[u8], what: &str) -> Result<u64, Error> {
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| Error::InvalidImage(format!("invalid {what} value")))
}

fn parse_pax_time(v: &[u8]) -> Result<Time, Error> {
    let s = std::str::from_utf8(v).map_err(|_| Error::InvalidImage("invalid PAX time".into()))?;
    let (sec, frac) = s.split_once('.').unwrap_or((s, ""));
    let sec: i64 = sec
        .parse()
        .map_err(|_| Error::InvalidImage(format!("invalid PAX time {s:?}")))?;
    let mut nsec: u32 = 0;
    let mut scale = 100_000_000;
    for c in frac.bytes().take(9) {
        if !c.is_ascii_digit() {
            return Err(Error::InvalidImage(format!("invalid PAX time {s:?}")));
        }
        nsec += (c - b'0') as u32 * scale;
        scale /= 10;
    }
    Ok(Time { sec, nsec })
}

/// PAX records: `"<len> <key>=<value>\n"`, where len counts the whole record.
/// Records as (key, value) pairs.
fn parse_pax(mut data: &[u8]) -> Result<Vec<Xattr>, Error> {
    let err = || Error::InvalidImage("malformed PAX extended header".into());
    let mut out = Vec::new();
    while !data.is_empty() {
        if data.iter().all(|&b| b == 0) {
            break;
        }
        let sp = data.iter().position(|&b| b == b' ').ok_or_else(err)?;
        let len: usize = std::str::from_utf8(&data[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(err)?;
        if len <= sp + 1 || len > data.len() || data[len - 1] != b'\n' {
            return Err(err());
        }
        let rec = &data[sp + 1..len - 1];
        let eq = rec.iter().position(|&b| b == b'=').ok_or_else(err)?;
        out.push((rec[..eq].to_vec(), rec[eq + 1..].to_vec()));
        data = &data[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(parse_number(b"0000644\0", "m").unwrap(), 0o644);
        assert_eq!(parse_number(b"  755 \0", "m").unwrap(), 0o755);
        assert_eq!(parse_number(b"\0\0\0\0", "m").unwrap(), 0);
        let mut b256 = [0u8; 12];
        b256[0] = 0x80;
        b256[11] = 0x01;
        b256[10] = 0x02;
        assert_eq!(parse_number(&b256, "s").unwrap(), 0x0201);
        assert!(parse_number(b"0009", "m").is_err());
        let mut huge = [0xffu8; 12];
        huge[0] = 0x80;
        assert!(
            parse_number(&huge, "s").is_err(),
            "overflow must be an error"
        );
    }

    #[test]
    fn pax_records() {
        let recs = parse_pax(b"16 path=a/b/c.d\n21 mtime=1.500000000\n").unwrap();
        assert_eq!(recs[0], (b"path".to_vec(), b"a/b/c.d".to_vec()));
        assert_eq!(
            parse_pax_time(&recs[1].1).unwrap(),
            Time {
                sec: 1,
                nsec: 500_000_000
            }
        );
        assert!(parse_pax(b"99 path=x\n").is_err());
        assert!(parse_pax(b"5 a=b\n").is_err());
    }
}
