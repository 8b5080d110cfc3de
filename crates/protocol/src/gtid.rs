//! GTIDs and GTID sets, in both flavours.
//!
//! - MySQL: a GTID is `uuid[:tag]:gno`; a set is `uuid[:tag]:a-b:c,uuid2:...`, kept as
//!   half-open intervals `[start, end)` per (uuid, tag), as the server's own `Gtid_set` does.
//!   Tags arrived in MySQL 8.4 (`GTID_TAGGED_LOG_EVENT`, tagged `PREVIOUS_GTIDS`).
//! - MariaDB: a GTID is `domain-server-seq`; a replication position is a list with at most one
//!   GTID per domain (`@@gtid_binlog_pos`, `@slave_connect_state`, `GTID_LIST` events).
//!
//! Text forms parse and print; the binary form used by `PREVIOUS_GTIDS` and
//! `COM_BINLOG_DUMP_GTID` decodes and encodes.
//!
//! References: MySQL `Gtid_set::encode` / `add_gtid_encoding` (sql/rpl_gtid_set.cc),
//! `mysql::serialization` variable-length integers (libs/mysql/serialization);
//! <https://mariadb.com/kb/en/gtid/>.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::reader::Reader;

/// A server UUID (`server_uuid`), 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Uuid(pub [u8; 16]);

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl FromStr for Uuid {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let hex: Vec<u8> = s.bytes().filter(|&b| b != b'-').collect();
        let bad = || Error::Invalid { what: "server uuid", reason: format!("{s:?} is not a UUID") };
        if hex.len() != 32 || s.len() != 36 {
            return Err(bad());
        }
        let mut out = [0u8; 16];
        for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
            let txt = std::str::from_utf8(pair).map_err(|_| bad())?;
            *o = u8::from_str_radix(txt, 16).map_err(|_| bad())?;
        }
        Ok(Uuid(out))
    }
}

/// A GTID tag (MySQL 8.4+): 1-32 characters of `[a-z0-9_]`, starting with a letter or `_`,
/// stored lower-case (the server normalises tags to lower case).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag(String);

impl Tag {
    /// Validates and normalises a tag.
    ///
    /// # Errors
    /// [`Error::Invalid`] when the tag is empty, longer than 32 characters or has other characters.
    pub fn new(s: &str) -> Result<Self> {
        let t = s.to_ascii_lowercase();
        let ok = !t.is_empty()
            && t.len() <= 32
            && t.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !t.as_bytes().first().is_some_and(u8::is_ascii_digit);
        if ok {
            Ok(Tag(t))
        } else {
            Err(Error::Invalid { what: "GTID tag", reason: format!("{s:?} is not a valid tag") })
        }
    }

    /// The tag text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The source of MySQL GTIDs: a server UUID and an optional tag.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tsid {
    /// Server UUID.
    pub uuid: Uuid,
    /// Tag, for tagged GTIDs (MySQL 8.4+).
    pub tag: Option<Tag>,
}

impl fmt::Display for Tsid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tag {
            Some(t) => write!(f, "{}:{}", self.uuid, t),
            None => write!(f, "{}", self.uuid),
        }
    }
}

/// One MySQL GTID: `uuid[:tag]:gno`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MysqlGtid {
    /// Where it was generated.
    pub tsid: Tsid,
    /// Transaction number, from 1.
    pub gno: u64,
}

impl fmt::Display for MysqlGtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.tsid, self.gno)
    }
}

/// A MySQL GTID set: half-open, sorted, non-overlapping intervals per [`Tsid`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GtidSet {
    sets: BTreeMap<Tsid, Vec<(u64, u64)>>,
}

impl GtidSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// True when the set holds no GTID.
    pub fn is_empty(&self) -> bool {
        self.sets.values().all(Vec::is_empty)
    }

    /// The (tsid, [start, end) intervals) entries, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&Tsid, &[(u64, u64)])> {
        self.sets.iter().map(|(k, v)| (k, v.as_slice()))
    }

    /// Adds the half-open interval `[start, end)` for `tsid`, merging with neighbours.
    pub fn add_interval(&mut self, tsid: Tsid, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let iv = self.sets.entry(tsid).or_default();
        iv.push((start, end));
        iv.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(iv.len());
        for &(s, e) in iv.iter() {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        *iv = merged;
    }

    /// Adds one GTID.
    pub fn add(&mut self, gtid: &MysqlGtid) {
        self.add_interval(gtid.tsid.clone(), gtid.gno, gtid.gno.saturating_add(1));
    }

    /// True when `gtid` is in the set.
    pub fn contains(&self, gtid: &MysqlGtid) -> bool {
        self.sets.get(&gtid.tsid).is_some_and(|iv| iv.iter().any(|&(s, e)| s <= gtid.gno && gtid.gno < e))
    }

    /// The union of two sets.
    pub fn union(&self, other: &GtidSet) -> GtidSet {
        let mut out = self.clone();
        for (tsid, iv) in other.iter() {
            for &(s, e) in iv {
                out.add_interval(tsid.clone(), s, e);
            }
        }
        out
    }

    /// True when every GTID of `self` is in `other`.
    pub fn is_subset(&self, other: &GtidSet) -> bool {
        self.iter().all(|(tsid, iv)| {
            let theirs = other.sets.get(tsid).map(Vec::as_slice).unwrap_or(&[]);
            iv.iter().all(|&(s, e)| theirs.iter().any(|&(ts, te)| ts <= s && e <= te))
        })
    }

    /// Decodes the binary form written in `PREVIOUS_GTIDS` events and sent in
    /// `COM_BINLOG_DUMP_GTID`.
    ///
    /// | bytes | field |
    /// |---|---|
    /// | 8 | untagged: `n_sids`; tagged (8.4+): byte 7 = 1 (format), bytes 1..7 = `n_sids`, byte 0 = 1 |
    /// | per sid: 16 | uuid |
    /// | per sid (tagged): varlen + n | tag length and tag |
    /// | per sid: 8 | `n_intervals` |
    /// | per interval: 8 + 8 | start (inclusive), end (exclusive) |
    ///
    /// # Errors
    /// [`Error::Truncated`] or [`Error::Invalid`] on malformed input.
    pub fn decode(r: &mut Reader<'_>) -> Result<GtidSet> {
        let head = r.u64("gtid set sid count")?;
        let tagged = head >> 56 == 1;
        let n_sids = if tagged { (head >> 8) & 0x0000_ffff_ffff_ffff } else { head };
        // every sid needs at least 24 bytes: reject absurd counts before looping
        if n_sids > (r.remaining() / 24) as u64 {
            return Err(Error::Truncated {
                what: "gtid set sids",
                needed: usize::try_from(n_sids.saturating_mul(24)).unwrap_or(usize::MAX),
                remaining: r.remaining(),
            });
        }
        let mut set = GtidSet::new();
        for _ in 0..n_sids {
            let uuid = Uuid(r.array::<16>("gtid set uuid")?);
            let tag = if tagged {
                let len = read_varlen_uint(r, "gtid set tag length")?;
                let bytes = r.take_u64(len, "gtid set tag")?;
                if bytes.is_empty() {
                    None
                } else {
                    let s = std::str::from_utf8(bytes)
                        .map_err(|_| Error::Invalid { what: "GTID tag", reason: "not UTF-8".into() })?;
                    Some(Tag::new(s)?)
                }
            } else {
                None
            };
            let n_iv = r.u64("gtid set interval count")?;
            if n_iv > (r.remaining() / 16) as u64 {
                return Err(Error::Truncated {
                    what: "gtid set intervals",
                    needed: usize::try_from(n_iv.saturating_mul(16)).unwrap_or(usize::MAX),
                    remaining: r.remaining(),
                });
            }
            let tsid = Tsid { uuid, tag };
            for _ in 0..n_iv {
                let start = r.u64("gtid interval start")?;
                let end = r.u64("gtid interval end")?;
                if start == 0 || end <= start {
                    return Err(Error::Invalid {
                        what: "gtid interval",
                        reason: format!("[{start}, {end}) is empty or starts at 0"),
                    });
                }
                set.add_interval(tsid.clone(), start, end);
            }
        }
        Ok(set)
    }

    /// Encodes the set in the binary form [`GtidSet::decode`] reads; the tagged format is used
    /// only when some entry has a tag (servers before 8.4 do not understand it).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let entries: Vec<_> = self.iter().filter(|(_, iv)| !iv.is_empty()).collect();
        let tagged = entries.iter().any(|(t, _)| t.tag.is_some());
        let n = entries.len() as u64;
        if tagged {
            out.extend_from_slice(&((1u64 << 56) | (n << 8) | 1).to_le_bytes());
        } else {
            out.extend_from_slice(&n.to_le_bytes());
        }
        for (tsid, iv) in entries {
            out.extend_from_slice(&tsid.uuid.0);
            if tagged {
                let tag = tsid.tag.as_ref().map(Tag::as_str).unwrap_or("");
                write_varlen_uint(out, tag.len() as u64);
                out.extend_from_slice(tag.as_bytes());
            }
            out.extend_from_slice(&(iv.len() as u64).to_le_bytes());
            for &(s, e) in iv {
                out.extend_from_slice(&s.to_le_bytes());
                out.extend_from_slice(&e.to_le_bytes());
            }
        }
    }
}

impl fmt::Display for GtidSet {
    /// MySQL's text form: `uuid:1-5:7,uuid2:tag:1-3`, as `@@gtid_executed` prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // MySQL groups tags under their uuid: uuid:1-5:tag:1-2
        let mut first = true;
        let mut last_uuid: Option<Uuid> = None;
        for (tsid, iv) in self.iter().filter(|(_, iv)| !iv.is_empty()) {
            if last_uuid != Some(tsid.uuid) {
                if !first {
                    f.write_str(",")?;
                }
                write!(f, "{}", tsid.uuid)?;
                last_uuid = Some(tsid.uuid);
            }
            first = false;
            if let Some(tag) = &tsid.tag {
                write!(f, ":{tag}")?;
            }
            for &(s, e) in iv {
                if e - s == 1 {
                    write!(f, ":{s}")?;
                } else {
                    write!(f, ":{}-{}", s, e - 1)?;
                }
            }
        }
        Ok(())
    }
}

impl FromStr for GtidSet {
    type Err = Error;
    /// Parses `uuid[:tag]:a[-b][:...][,uuid...]`; white space and newlines (as
    /// `@@gtid_executed` prints them) are ignored.
    fn from_str(s: &str) -> Result<Self> {
        let mut set = GtidSet::new();
        let cleaned: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        if cleaned.is_empty() {
            return Ok(set);
        }
        let bad = |reason: String| Error::Invalid { what: "GTID set", reason };
        for part in cleaned.split(',') {
            let mut fields = part.split(':');
            let uuid: Uuid = fields.next().unwrap_or("").parse()?;
            let mut tag: Option<Tag> = None;
            let mut saw_interval = false;
            for field in fields {
                if field.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
                    let (a, b) = match field.split_once('-') {
                        Some((a, b)) => (a, b),
                        None => (field, field),
                    };
                    let a: u64 = a.parse().map_err(|_| bad(format!("bad interval {field:?} in {part:?}")))?;
                    let b: u64 = b.parse().map_err(|_| bad(format!("bad interval {field:?} in {part:?}")))?;
                    if a == 0 || b < a || b == u64::MAX {
                        return Err(bad(format!("bad interval {field:?} in {part:?}")));
                    }
                    set.add_interval(Tsid { uuid, tag: tag.clone() }, a, b + 1);
                    saw_interval = true;
                } else {
                    tag = Some(Tag::new(field)?);
                }
            }
            if !saw_interval {
                return Err(bad(format!("{part:?} has no interval")));
            }
        }
        Ok(set)
    }
}

/// Reads a `mysql::serialization` variable-length unsigned integer: the number of trailing
/// one bits in the first byte says how many more bytes follow (0-8); the value is the
/// little-endian number with those marker bits shifted out.
///
/// # Errors
/// [`Error::Truncated`] when the encoding runs past the end.
pub fn read_varlen_uint(r: &mut Reader<'_>, what: &'static str) -> Result<u64> {
    let first = r.u8(what)?;
    let extra = first.trailing_ones() as usize; // 0..=8
    if extra == 8 {
        return r.u64(what);
    }
    let rest = r.uint_le(extra, what)?;
    // extra <= 7 here, so `rest << 8` keeps every bit and the shift is in range
    let full = (rest << 8) | u64::from(first);
    Ok(full >> (extra + 1))
}

/// Writes a `mysql::serialization` variable-length unsigned integer (see [`read_varlen_uint`]).
pub fn write_varlen_uint(out: &mut Vec<u8>, v: u64) {
    // bytes needed: 7 bits fit in 1 byte, 14 in 2, ..., 56 in 8, everything else in 9
    let bits = 64 - v.leading_zeros() as usize;
    let extra = if bits <= 56 { bits.saturating_sub(1) / 7 } else { 8 };
    if extra == 8 {
        out.push(0xff);
        out.extend_from_slice(&v.to_le_bytes());
        return;
    }
    let marker = (1u64 << extra) - 1;
    let encoded = (v << (extra + 1)) | marker;
    out.extend_from_slice(encoded.to_le_bytes().get(..=extra).unwrap_or(&[]));
}

/// One MariaDB GTID: `domain-server-seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MariadbGtid {
    /// Replication domain.
    pub domain_id: u32,
    /// Server that generated it.
    pub server_id: u32,
    /// Sequence number within the domain.
    pub seq_no: u64,
}

impl fmt::Display for MariadbGtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain_id, self.server_id, self.seq_no)
    }
}

impl FromStr for MariadbGtid {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::Invalid { what: "MariaDB GTID", reason: format!("{s:?} is not domain-server-seq") };
        let mut it = s.trim().splitn(3, '-');
        let d = it.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
        let sv = it.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
        let n = it.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
        Ok(MariadbGtid { domain_id: d, server_id: sv, seq_no: n })
    }
}

/// A MariaDB replication position: the last GTID per domain (sorted by domain).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MariadbGtidList {
    by_domain: BTreeMap<u32, MariadbGtid>,
}

impl MariadbGtidList {
    /// The empty position (start of every domain).
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `gtid` as the newest of its domain.
    pub fn advance(&mut self, gtid: MariadbGtid) {
        self.by_domain.insert(gtid.domain_id, gtid);
    }

    /// The GTIDs, one per domain.
    pub fn iter(&self) -> impl Iterator<Item = &MariadbGtid> {
        self.by_domain.values()
    }

    /// True when no domain has a position.
    pub fn is_empty(&self) -> bool {
        self.by_domain.is_empty()
    }

    /// The GTID recorded for a domain.
    pub fn get(&self, domain_id: u32) -> Option<&MariadbGtid> {
        self.by_domain.get(&domain_id)
    }

    /// True when every domain of `self` is at or before the same domain in `other`.
    pub fn is_at_or_before(&self, other: &MariadbGtidList) -> bool {
        self.iter().all(|g| other.get(g.domain_id).is_some_and(|o| g.seq_no <= o.seq_no))
    }
}

impl FromIterator<MariadbGtid> for MariadbGtidList {
    fn from_iter<I: IntoIterator<Item = MariadbGtid>>(iter: I) -> Self {
        let mut l = MariadbGtidList::new();
        for g in iter {
            l.advance(g);
        }
        l
    }
}

impl fmt::Display for MariadbGtidList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{g}")?;
        }
        Ok(())
    }
}

impl FromStr for MariadbGtidList {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        s.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::parse::<MariadbGtid>)
            .collect::<Result<Vec<_>>>()
            .map(|v| v.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn mysql_text_round_trip() {
        let s = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7:mytag:1-2,55778904-0299-11f1-b1b8-4ef0c4956feb:3";
        let set: GtidSet = s.parse().unwrap();
        assert_eq!(set.to_string(), s);
        let g = MysqlGtid {
            tsid: Tsid { uuid: "3e11fa47-71ca-11e1-9e33-c80aa9429562".parse().unwrap(), tag: None },
            gno: 6,
        };
        assert!(!set.contains(&g));
        assert!(set.contains(&MysqlGtid { gno: 7, ..g.clone() }));
    }

    #[test]
    fn varlen_known_values() {
        // 5 fits in 7 bits: one byte, value shifted left by one
        let mut out = Vec::new();
        write_varlen_uint(&mut out, 5);
        assert_eq!(out, [0x0a]);
        out.clear();
        write_varlen_uint(&mut out, 200);
        assert_eq!(out, [0x21, 0x03]); // (200 << 2) | 0b01
    }

    #[test]
    fn mariadb_list() {
        let l: MariadbGtidList = "0-1-10, 1-2-5".parse().unwrap();
        assert_eq!(l.to_string(), "0-1-10,1-2-5");
        assert!("0-1".parse::<MariadbGtidList>().is_err());
    }

    fn arb_set() -> impl Strategy<Value = GtidSet> {
        let tsid = (any::<[u8; 16]>(), proptest::option::of("[a-z_][a-z0-9_]{0,8}"))
            .prop_map(|(u, t)| Tsid { uuid: Uuid(u), tag: t.map(|t| Tag::new(&t).unwrap()) });
        proptest::collection::vec((tsid, 1u64..1000, 1u64..50), 0..6).prop_map(|v| {
            let mut s = GtidSet::new();
            for (t, a, n) in v {
                s.add_interval(t, a, a + n);
            }
            s
        })
    }

    proptest! {
        #[test]
        fn varlen_round_trip(v in any::<u64>()) {
            let mut out = Vec::new();
            write_varlen_uint(&mut out, v);
            let mut r = Reader::new(&out);
            prop_assert_eq!(read_varlen_uint(&mut r, "v").unwrap(), v);
            prop_assert!(r.is_empty());
        }

        #[test]
        fn set_text_and_binary_round_trip(set in arb_set()) {
            let text = set.to_string();
            let parsed: GtidSet = text.parse().unwrap();
            prop_assert_eq!(&parsed, &set);
            let mut bin = Vec::new();
            set.encode(&mut bin);
            let decoded = GtidSet::decode(&mut Reader::new(&bin)).unwrap();
            prop_assert_eq!(&decoded, &set);
        }

        #[test]
        fn union_contains_both(a in arb_set(), b in arb_set()) {
            let u = a.union(&b);
            prop_assert!(a.is_subset(&u));
            prop_assert!(b.is_subset(&u));
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = GtidSet::decode(&mut Reader::new(&bytes));
        }
    }

    proptest! {
        /// GTID texts (sets, MariaDB lists) from arbitrary strings: parsed or refused.
        #[test]
        fn text_never_panics(s in "[0-9a-fA-F:,\\-_ a-z]{0,80}", raw in ".{0,40}") {
            for t in [&s, &raw] {
                let _ = t.parse::<GtidSet>();
                let _ = t.parse::<MariadbGtidList>();
                let _ = t.parse::<MariadbGtid>();
            }
        }
    }
}
