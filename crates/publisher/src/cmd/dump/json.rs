//! `sluice dump`'s JSON: **where a row change becomes a JSON line** (written straight into a
//! byte buffer, the parts every row of an event shares written once per event), and the
//! `--events` objects. Values are rendered by [`crate::render`].

use std::sync::Arc;

use serde_json::{json, Map, Value as Json};
use sluice_binlog::column::Column;
use sluice_binlog::event::Event;
use sluice_binlog::rows::{ImageVisitor, RowsIter, RowsKind};
use sluice_binlog::walk::Located;
use sluice_binlog::{Error as BinlogError, EventHeader, TableMap, Value};

use crate::render::{
    end_object, image_json, json_keys, write_iso_utc, write_json_num, write_json_str, write_member, write_u64, JsonKey,
};

/// The JSON lines of one rows event. A line's fields, in the order earlier releases and
/// `--events` use: type, database, table, timestamp, ts, position {file, offset, row},
/// server_id, gtid, before, after, xid. Everything but the row number and the images is the
/// same for every row of the event; `xid` comes last and is written when the transaction ends
/// (the line is held open after `"xid":` until then, see `spool::TxSpool`).
pub struct RowLines {
    kind: RowsKind,
    prefix: Vec<u8>,
    middle: Vec<u8>,
    keys: Arc<[JsonKey]>,
}

/// The JSON keys (`"name":`) of the tables dumped lately, by TABLE_MAP: built once per table
/// rather than per rows event (their allocations were 3% of a dump's time).
#[derive(Default)]
pub struct KeysCache {
    tables: Vec<(Arc<TableMap>, Arc<[JsonKey]>)>,
}

impl KeysCache {
    /// Tables remembered at most (a TABLE_MAP is a new one each transaction on MariaDB).
    const TABLES: usize = 16;

    /// The keys of `table`'s columns.
    pub fn keys(&mut self, table: &Arc<TableMap>) -> Arc<[JsonKey]> {
        if let Some((_, k)) = self.tables.iter().find(|(t, _)| Arc::ptr_eq(t, table)) {
            return Arc::clone(k);
        }
        if self.tables.len() == Self::TABLES {
            self.tables.remove(0);
        }
        let keys: Arc<[JsonKey]> = json_keys(&table.columns).into();
        self.tables.push((Arc::clone(table), Arc::clone(&keys)));
        keys
    }
}

impl RowLines {
    /// The shared parts of a rows event's lines (`keys` from [`KeysCache::keys`]).
    pub fn new(
        kind: RowsKind,
        table: &TableMap,
        keys: Arc<[JsonKey]>,
        header: &EventHeader,
        file: &str,
        offset: u64,
        gtid: Option<&str>,
    ) -> RowLines {
        // written once per rows event (about seven rows each in the benchmark), without
        // `format!` or a buffer grown step by step: 7,700 instructions an event before
        let mut prefix = Vec::with_capacity(160 + table.database.len() + table.table.len() + file.len());
        let mut middle = Vec::with_capacity(48 + gtid.map_or(0, str::len));
        prefix.extend_from_slice(b"{\"type\":");
        write_json_str(&mut prefix, kind.sql_verb());
        prefix.extend_from_slice(b",\"database\":");
        write_json_str(&mut prefix, &table.database);
        prefix.extend_from_slice(b",\"table\":");
        write_json_str(&mut prefix, &table.table);
        prefix.extend_from_slice(b",\"timestamp\":\"");
        write_iso_utc(&mut prefix, header.timestamp);
        prefix.extend_from_slice(b"\",\"ts\":");
        write_json_num(&mut prefix, header.timestamp);
        prefix.extend_from_slice(b",\"position\":{\"file\":");
        write_json_str(&mut prefix, file);
        prefix.extend_from_slice(b",\"offset\":");
        write_json_num(&mut prefix, offset);
        prefix.extend_from_slice(b",\"row\":");
        middle.extend_from_slice(b"},\"server_id\":");
        write_json_num(&mut middle, header.server_id);
        middle.extend_from_slice(b",\"gtid\":");
        match gtid {
            Some(g) => write_json_str(&mut middle, g),
            None => middle.extend_from_slice(b"null"),
        }
        middle.extend_from_slice(b",\"before\":");
        RowLines { kind, prefix, middle, keys }
    }

    /// Appends the line of row `idx`, the next row change of `rows`, to `line`, up to
    /// `"xid":`. Each value is written as it is decoded, not collected first. Returns what
    /// [`RowsIter::next_with`] returns; when that is not a row, `line` is as it was.
    pub fn write_next<'r>(
        &self,
        line: &mut Vec<u8>,
        idx: usize,
        rows: &mut RowsIter<'r>,
        columns: &[Column],
    ) -> Option<Result<(), BinlogError>> {
        let start = line.len();
        line.extend_from_slice(&self.prefix);
        write_u64(line, idx as u64);
        line.extend_from_slice(&self.middle);
        if self.kind == RowsKind::Write {
            line.extend_from_slice(b"null,\"after\":");
        }
        let mut images = Images { line, columns, keys: &self.keys, open: None };
        let res = rows.next_with(&mut images);
        if let Some(Ok(())) = res {
            images.close();
            if self.kind == RowsKind::Delete {
                line.extend_from_slice(b",\"after\":null");
            }
            line.extend_from_slice(b",\"xid\":");
        } else {
            line.truncate(start);
        }
        res
    }
}

/// A line's `before` and `after` objects, written as the row's values are decoded.
struct Images<'a> {
    line: &'a mut Vec<u8>,
    columns: &'a [Column],
    keys: &'a [JsonKey],
    /// Where the object being written starts.
    open: Option<usize>,
}

impl Images<'_> {
    /// Ends the object being written; false when there is none.
    fn close(&mut self) -> bool {
        let Some(open) = self.open.take() else { return false };
        end_object(self.line, open);
        true
    }
}

impl<'r> ImageVisitor<'r> for Images<'_> {
    fn image(&mut self, before: bool) {
        // an UPDATE's after image follows its before image
        if !before && self.close() {
            self.line.extend_from_slice(b",\"after\":");
        }
        self.open = Some(self.line.len());
    }

    #[inline]
    fn value(&mut self, column: usize, value: &Value<'r>) {
        write_member(self.line, self.columns, self.keys, column, value);
    }
}

/// The line of a table a statement emptied (`by`: TRUNCATE TABLE, DROP TABLE, ...): the fields
/// of a row line, `type` `TRUNCATE`, no images, and the statement kind.
pub fn emptied_line(
    database: &str,
    table: &str,
    by: &str,
    header: &EventHeader,
    file: &str,
    offset: u64,
    gtid: Option<&str>,
) -> Vec<u8> {
    let line = json!({
        "type": "TRUNCATE",
        "database": database,
        "table": table,
        "timestamp": iso_utc(header.timestamp),
        "ts": header.timestamp,
        "position": {"file": file, "offset": offset, "row": 0},
        "server_id": header.server_id,
        "gtid": gtid,
        "statement": by,
        "before": null,
        "after": null,
        "xid": null,
    });
    let mut out = line.to_string().into_bytes();
    out.push(b'\n');
    out
}

/// An event as the JSON object `--events` prints: its header fields and the fields of its body.
///
/// # Errors
/// A rows event whose rows do not decode.
pub fn event_json(ev: &Located<'_>) -> Result<Json, BinlogError> {
    let h = &ev.event.header;
    let mut m = Map::new();
    m.insert("event".into(), Json::from(ev.event.event.type_name()));
    m.insert("type_code".into(), Json::from(h.event_type.code()));
    m.insert("position".into(), json!({ "file": ev.file, "offset": ev.offset, "in_payload": ev.in_payload }));
    m.insert("timestamp".into(), Json::from(iso_utc(h.timestamp)));
    m.insert("server_id".into(), Json::from(h.server_id));
    m.insert("size".into(), Json::from(h.event_size));
    m.insert("next_position".into(), Json::from(h.log_pos));
    let data = match &ev.event.event {
        Event::FormatDescription(f) => {
            json!({ "server_version": f.server_version, "binlog_version": f.binlog_version, "checksum": format!("{:?}", f.checksum) })
        }
        Event::Rotate(r) => json!({ "next_file": r.next_file, "position": r.position }),
        Event::Query(q) => {
            json!({ "schema": q.schema, "query": q.query, "error_code": q.error_code, "thread_id": q.thread_id, "sql_mode": q.status.sql_mode, "time_zone": q.status.time_zone, "charset": q.status.charset })
        }
        Event::Xid(x) => json!({ "xid": x }),
        Event::Gtid(g) => {
            json!({ "gtid": g.gtid.to_string(), "anonymous": g.anonymous, "last_committed": g.last_committed, "sequence_number": g.sequence_number, "transaction_length": g.transaction_length, "immediate_commit_timestamp": g.immediate_commit_timestamp })
        }
        Event::PreviousGtids(s) => json!({ "gtid_set": s.to_string() }),
        Event::TableMap(t) => json!({
            "table_id": t.table_id, "database": &*t.database, "table": &*t.table,
            "columns": t.columns.iter().map(|c| json!({ "name": c.display_name(), "type": c.ty.name(), "meta": c.meta, "nullable": c.nullable, "unsigned": c.unsigned, "collation": c.collation, "primary_key": c.primary_key })).collect::<Vec<_>>(),
        }),
        Event::Rows(r) => {
            let mut rows = Vec::new();
            for row in r.rows() {
                let row = row.map_err(|e| e.at(ev.file, ev.offset, h.event_type))?;
                rows.push(json!({
                    "before": row.before.as_ref().map(|i| image_json(&i.values, &r.table.columns)),
                    "after": row.after.as_ref().map(|i| image_json(&i.values, &r.table.columns)),
                }));
            }
            json!({ "table": r.table.qualified_name(), "table_id": r.table.table_id, "flags": r.flags, "rows": rows })
        }
        Event::TransactionPayload(p) => {
            json!({ "compression_type": p.compression_type, "payload_size": p.payload_size, "uncompressed_size": p.uncompressed_size })
        }
        Event::RowsQuery(q) | Event::MariadbAnnotateRows(q) => json!({ "query": q }),
        Event::Intvar(i) => json!({ "kind": i.kind, "value": i.value }),
        Event::Rand { seed1, seed2 } => json!({ "seed1": seed1, "seed2": seed2 }),
        Event::UserVar(u) => json!({ "name": u.name, "is_null": u.value.is_none() }),
        Event::Heartbeat { file, position } => json!({ "file": file, "position": position }),
        Event::Incident { kind, message } => json!({ "incident": kind, "message": message }),
        Event::XaPrepare { one_phase } => json!({ "one_phase": one_phase }),
        Event::MariadbBinlogCheckpoint(f) => json!({ "file": f }),
        Event::MariadbGtid(g) => {
            json!({ "gtid": g.gtid.to_string(), "flags": g.flags, "standalone": g.is_standalone(), "commit_id": g.commit_id })
        }
        Event::MariadbGtidList(l) => json!({ "gtid_list": l.to_string() }),
        _ => Json::Null,
    };
    m.insert("data".into(), data);
    Ok(Json::Object(m))
}

/// Seconds since the epoch as `YYYY-MM-DDThh:mm:ssZ`.
pub fn iso_utc(secs: u32) -> String {
    let mut out = Vec::with_capacity(24);
    write_iso_utc(&mut out, secs);
    String::from_utf8(out).unwrap_or_default()
}
