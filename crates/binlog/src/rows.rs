//! Rows events: WRITE/UPDATE/DELETE_ROWS (v1, v2), PARTIAL_UPDATE_ROWS, MariaDB's
//! compressed variants, and the 5.1 pre-GA ones.
//!
//! | bytes | field |
//! |---|---|
//! | 6 (4 in pre-GA) | table id |
//! | 2 | flags (bit 0: end of statement) |
//! | v2 only: 2 + n | extra data length (counting itself) and extra data |
//! | lenenc | column count |
//! | (n+7)/8 | columns present in the before image (or the only image) |
//! | (n+7)/8 | UPDATE/PARTIAL only: columns present in the after image |
//! | rest | rows; MariaDB's compressed types zlib-compress this part |
//!
//! Each row image: (PARTIAL after-image only: value options, partial-JSON bits), a NULL
//! bitmap over the *present* columns, then the values of present non-NULL columns.
//! Row images are decoded lazily by [`RowsEvent::rows`], one row at a time, so a huge event
//! never becomes a huge vector.
//!
//! Reference: <https://dev.mysql.com/doc/dev/mysql-server/latest/classbinary__log_1_1Rows__event.html>

use std::borrow::Cow;
use std::sync::Arc;

use sluice_protocol::Reader;

use crate::column::{Column, ColumnType};
use crate::error::{Error, Result};
use crate::event_type::EventType;
use crate::jsonb;
use crate::table_map::{bit_lsb, TableMap};
use crate::value::{decode_value_with, Value};

/// What a rows event does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowsKind {
    /// INSERT: after images only.
    Write,
    /// UPDATE: before and after images.
    Update,
    /// UPDATE with partial JSON after images (MySQL 8.0.3+).
    PartialUpdate,
    /// DELETE: before images only.
    Delete,
}

impl RowsKind {
    /// The kind of a rows event type, with the MariaDB compression flag, or None when the type
    /// is not a rows event.
    pub fn of(t: EventType) -> Option<(RowsKind, bool)> {
        use EventType::*;
        Some(match t {
            WriteRowsV1 | WriteRowsV2 | PreGaWriteRows => (RowsKind::Write, false),
            UpdateRowsV1 | UpdateRowsV2 | PreGaUpdateRows => (RowsKind::Update, false),
            DeleteRowsV1 | DeleteRowsV2 | PreGaDeleteRows => (RowsKind::Delete, false),
            PartialUpdateRows => (RowsKind::PartialUpdate, false),
            MariadbWriteRowsCompressedV1 | MariadbWriteRowsCompressed => (RowsKind::Write, true),
            MariadbUpdateRowsCompressedV1 | MariadbUpdateRowsCompressed => (RowsKind::Update, true),
            MariadbDeleteRowsCompressedV1 | MariadbDeleteRowsCompressed => (RowsKind::Delete, true),
            _ => return None,
        })
    }

    /// `INSERT`, `UPDATE` or `DELETE`.
    pub fn sql_verb(self) -> &'static str {
        match self {
            RowsKind::Write => "INSERT",
            RowsKind::Update | RowsKind::PartialUpdate => "UPDATE",
            RowsKind::Delete => "DELETE",
        }
    }

    /// The event name for listings.
    pub fn name(self) -> &'static str {
        match self {
            RowsKind::Write => "WRITE_ROWS_EVENT",
            RowsKind::Update => "UPDATE_ROWS_EVENT",
            RowsKind::PartialUpdate => "PARTIAL_UPDATE_ROWS_EVENT",
            RowsKind::Delete => "DELETE_ROWS_EVENT",
        }
    }
}

/// `STMT_END_F`: the last rows event of a statement.
pub const STMT_END_F: u16 = 1;

/// A rows event with its table, ready to iterate its rows.
#[derive(Debug, Clone)]
pub struct RowsEvent<'a> {
    /// What it does.
    pub kind: RowsKind,
    /// The exact event type.
    pub event_type: EventType,
    /// The table, from the TABLE_MAP with this event's table id.
    pub table: Arc<TableMap>,
    /// Flags (`STMT_END_F`, ...).
    pub flags: u16,
    /// v2 extra data (NDB info, partition info), raw.
    pub extra_data: Cow<'a, [u8]>,
    /// Column count as the event states it.
    pub column_count: usize,
    present_before: Cow<'a, [u8]>,
    present_after: Cow<'a, [u8]>,
    /// Columns set in `present_before` / `present_after` (the NULL bitmap of each row image
    /// has one bit per present column), counted once per event rather than once per row.
    before_count: usize,
    after_count: usize,
    rows: Cow<'a, [u8]>,
}

/// One row change: before and/or after image.
#[derive(Debug, Clone, PartialEq)]
pub struct RowChange<'a> {
    /// The row before the change (UPDATE, DELETE).
    pub before: Option<RowImage<'a>>,
    /// The row after the change (INSERT, UPDATE).
    pub after: Option<RowImage<'a>>,
}

/// One row image: a value per table column, `None` where the image does not include the
/// column (`binlog_row_image=MINIMAL/NOBLOB`), `Some(Value::Null)` for SQL NULL.
#[derive(Debug, Clone, PartialEq)]
pub struct RowImage<'a> {
    /// Values by column index.
    pub values: Vec<Option<Value<'a>>>,
}

impl<'a> RowsEvent<'a> {
    /// Parses a rows event body against its table map. `post_header_len` comes from the FDE;
    /// `uncompress` inflates MariaDB's compressed row data.
    pub(crate) fn parse(
        event_type: EventType,
        body: &'a [u8],
        post_header_len: u8,
        tables: &impl Fn(u64) -> Option<Arc<TableMap>>,
        uncompress: impl Fn(&'a [u8]) -> Result<Vec<u8>>,
    ) -> Result<RowsEvent<'a>> {
        let (kind, compressed) = RowsKind::of(event_type)
            .ok_or_else(|| Error::invalid("rows event", format!("{event_type} is not a rows event")))?;
        let mut r = Reader::new(body);
        let table_id = if post_header_len == 6 { u64::from(r.u32("table id")?) } else { r.uint_le(6, "table id")? };
        let flags = r.u16("rows flags")?;
        let v2 = matches!(
            event_type,
            EventType::WriteRowsV2
                | EventType::UpdateRowsV2
                | EventType::DeleteRowsV2
                | EventType::PartialUpdateRows
                | EventType::MariadbWriteRowsCompressed
                | EventType::MariadbUpdateRowsCompressed
                | EventType::MariadbDeleteRowsCompressed
        );
        let extra_data = if v2 {
            let n = r.u16("rows extra data length")?;
            Cow::Borrowed(r.take(usize::from(n).saturating_sub(2), "rows extra data")?)
        } else {
            Cow::Borrowed(&[][..])
        };
        let table = tables(table_id).ok_or(Error::UnknownTable { table_id })?;
        let n = r.lenenc_int("rows column count")?;
        let column_count = usize::try_from(n).unwrap_or(usize::MAX);
        if column_count > table.columns.len() {
            return Err(Error::invalid(
                "rows event",
                format!("{n} columns, but the TABLE_MAP of {} has {}", table.qualified_name(), table.columns.len()),
            ));
        }
        let bitmap_len = column_count.div_ceil(8);
        let first = r.take(bitmap_len, "columns-present bitmap")?;
        let second = match kind {
            RowsKind::Update | RowsKind::PartialUpdate => r.take(bitmap_len, "after-image columns bitmap")?,
            _ => first,
        };
        let (present_before, present_after) = match kind {
            RowsKind::Write => (Cow::Borrowed(&[][..]), Cow::Borrowed(first)),
            RowsKind::Delete => (Cow::Borrowed(first), Cow::Borrowed(&[][..])),
            _ => (Cow::Borrowed(first), Cow::Borrowed(second)),
        };
        let rest = r.take_rest();
        let rows = if compressed { Cow::Owned(uncompress(rest)?) } else { Cow::Borrowed(rest) };
        let count = |bitmap: &[u8]| (0..column_count).filter(|&i| bit_lsb(bitmap, i)).count();
        let (before_count, after_count) = (count(&present_before), count(&present_after));
        Ok(RowsEvent {
            kind,
            event_type,
            table,
            flags,
            extra_data,
            column_count,
            present_before,
            present_after,
            before_count,
            after_count,
            rows,
        })
    }

    /// A copy that owns its bytes, to outlive the buffer the event was read into (`sluice dump`
    /// hands events to threads that render them while the next ones are read).
    pub fn detached(&self) -> RowsEvent<'static> {
        let own = |b: &Cow<'a, [u8]>| Cow::Owned(b.to_vec());
        RowsEvent {
            kind: self.kind,
            event_type: self.event_type,
            table: Arc::clone(&self.table),
            flags: self.flags,
            extra_data: own(&self.extra_data),
            column_count: self.column_count,
            present_before: own(&self.present_before),
            present_after: own(&self.present_after),
            before_count: self.before_count,
            after_count: self.after_count,
            rows: own(&self.rows),
        }
    }

    /// Bytes of the row images (after decompression).
    pub fn rows_bytes(&self) -> usize {
        self.rows.len()
    }

    /// At most the bytes of binary, text, geometry and vector values one row change of this
    /// event holds, both images together: the row data's length, plus the trailing zeros of
    /// BINARY(n) values, which the binlog strips and decoding puts back (at most 255 a column
    /// per image). Cheap, for refusing a row too large to publish before converting it.
    pub fn value_bytes_bound(&self) -> usize {
        self.rows.len().saturating_add(2 * 255 * self.table.columns.len())
    }

    /// True when every row image of the event holds every column of its table map (no
    /// `binlog_row_image` MINIMAL or NOBLOB image, no partial JSON): the n-th value of an
    /// image is the n-th column's.
    pub fn full_images(&self) -> bool {
        let n = self.table.columns.len();
        let full = |count: usize, bitmap: &[u8]| bitmap.is_empty() || count == n;
        self.kind != RowsKind::PartialUpdate
            && self.column_count == n
            && full(self.before_count, &self.present_before)
            && full(self.after_count, &self.present_after)
    }

    /// True when this is the last rows event of its statement.
    pub fn is_statement_end(&self) -> bool {
        self.flags & STMT_END_F != 0
    }

    /// The row changes, decoded one at a time.
    pub fn rows(&self) -> RowsIter<'_> {
        RowsIter { ev: self, r: Reader::new(&self.rows), done: false }
    }

    /// Number of row images in the event, walked without keeping values.
    ///
    /// # Errors
    /// As [`RowsEvent::rows`].
    pub fn count_rows(&self) -> Result<usize> {
        let mut n = 0;
        for row in self.rows() {
            row?;
            n += 1;
        }
        Ok(n)
    }

    /// Decodes one row image into `values` (cleared first; its capacity is reused, so a
    /// caller walking many rows with [`RowsIter::next_into`] allocates once per event).
    fn read_image_into<'r>(
        &'r self,
        r: &mut Reader<'r>,
        present: &[u8],
        present_count: usize,
        after_of: Option<&RowImage<'r>>,
        values: &mut Vec<Option<Value<'r>>>,
    ) -> Result<()> {
        clear_values(values);
        // Each value is decoded into its slot in place (columns absent from the image, and
        // those past `column_count`, stay `None`). Pushed, a value was put together on the
        // stack from narrow stores and copied out with wide loads, a store-forwarding stall
        // on every value (a tenth of a dump's time).
        values.resize_with(self.table.columns.len(), || None);
        self.walk_image::<false>(r, present, present_count, after_of, &mut NoVisitor, |i, value| {
            if let Some(slot) = values.get_mut(i) {
                put(slot, value);
            }
        })
    }

    /// Decodes one row image, handing each present column's index and value in column order
    /// to `own` (which keeps it: [`RowsIter::next_into`]) or, with `LEND`, to `lend` (which
    /// looks at it: [`RowsIter::next_with`]): **where a row image's bytes become values**. A
    /// lent value is let go in the arm that decoded it, where its variant is known, so the
    /// values that own nothing (nearly all) cost no check (2% of the record path's instructions
    /// when the visitor let each one go).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn walk_image<'r, const LEND: bool>(
        &'r self,
        r: &mut Reader<'r>,
        present: &[u8],
        present_count: usize,
        after_of: Option<&RowImage<'r>>,
        lend: &mut impl ImageVisitor<'r>,
        mut own: impl FnMut(usize, Value<'r>),
    ) -> Result<()> {
        // the visitor is an argument, not captured: the raw reads below use it too
        let mut f = |visitor: &mut _, i: usize, value: Value<'r>| {
            if LEND {
                ImageVisitor::value(visitor, i, &value);
                release(value);
            } else {
                own(i, value);
            }
        };
        let table = &self.table;
        // PARTIAL_UPDATE after images start with value options and the partial-JSON bits
        let mut partial_bits: Option<&[u8]> = None;
        if self.kind == RowsKind::PartialUpdate && after_of.is_some() {
            let options = r.lenenc_int("partial update value options")?;
            if options & 1 != 0 {
                partial_bits = Some(r.take(table.json_column_count().div_ceil(8), "partial JSON bitmap")?);
            }
        }
        let nulls = r.take(present_count.div_ceil(8), "row NULL bitmap")?;
        let columns = table.columns.get(..self.column_count).unwrap_or(&table.columns);
        // The common case, a full image without partial JSON: every column present, so the
        // n-th value goes to the n-th column and the NULL bitmap is indexed by column.
        if present_count == self.column_count && partial_bits.is_none() {
            let mut i = 0;
            loop {
                // a lending walk's visitor reads what values it can itself (ImageVisitor::raw_run)
                if LEND {
                    // (never backwards: a visitor's mistake must not loop)
                    i = lend.raw_run(i, columns, nulls, r).max(i);
                }
                let Some(col) = columns.get(i) else { break };
                if bit_lsb(nulls, i) {
                    f(lend, i, Value::Null);
                } else {
                    let start = r.position();
                    // `f` called in the arm that decodes the value: see decode_value_with
                    if let Err(e) = decode_value_with(r, col, |value| f(lend, i, value)) {
                        return Err(column_error(table, i, col, start, e));
                    }
                }
                i += 1;
            }
            return Ok(());
        }
        // Any other image: the columns-present bitmap says which columns have a value, and
        // the NULL bitmap is indexed among those. With a full image (a partial-JSON one) the
        // bitmap is not consulted per column; JSON columns are counted only for partial JSON.
        let mut k = 0; // index among present columns
        let mut json_k = 0; // index among JSON columns
        let all_present = present_count == self.column_count;
        for (i, col) in columns.iter().enumerate() {
            let partial = match partial_bits {
                Some(b) if col.ty == ColumnType::Json => {
                    json_k += 1;
                    bit_lsb(b, json_k - 1)
                }
                _ => false,
            };
            if !all_present && !bit_lsb(present, i) {
                continue;
            }
            let is_null = bit_lsb(nulls, k);
            k += 1;
            if is_null {
                f(lend, i, Value::Null);
                continue;
            }
            let start = r.position();
            if partial {
                let value =
                    read_partial_json(r, col.meta, after_of.and_then(|b| b.values.get(i)).and_then(Option::as_ref))
                        .map_err(|e| column_error(table, i, col, start, e))?;
                f(lend, i, value);
            } else {
                decode_value_with(r, col, |value| f(lend, i, value))
                    .map_err(|e| column_error(table, i, col, start, e))?;
            }
        }
        Ok(())
    }

    /// The columns-present bitmap of the before or after images, and how many it sets.
    fn present(&self, before: bool) -> (&[u8], usize) {
        if before {
            (&self.present_before, self.before_count)
        } else {
            (&self.present_after, self.after_count)
        }
    }

    /// Decodes the image at `r` into `slot`, reusing the vector already there.
    fn read_image_slot<'r>(
        &'r self,
        r: &mut Reader<'r>,
        before: bool,
        after_of: Option<&RowImage<'r>>,
        slot: &mut Option<RowImage<'r>>,
    ) -> Result<()> {
        let (present, count) = self.present(before);
        let img = slot.get_or_insert_with(|| RowImage { values: Vec::new() });
        let res = self.read_image_into(r, present, count, after_of, &mut img.values);
        if res.is_err() {
            *slot = None;
        }
        res
    }
}

/// Wraps a value's decoding error with its table and column (out of line: the row loop
/// should not carry the formatting).
#[cold]
#[inline(never)]
fn column_error(table: &TableMap, i: usize, col: &Column, start: usize, e: Error) -> Error {
    Error::Column {
        table: table.qualified_name(),
        column: format!("{} ({} {}) at row byte {start}", i + 1, col.display_name(), col.ty.name()),
        source: Box::new(e),
    }
}

/// Empties a row image's vector for reuse. `Vec::clear` would call `Value`'s drop glue for
/// every element: an out-of-line function that saves six registers before it looks at the
/// tag, about 20 instructions per value although almost no value owns memory. Only the
/// variants that own memory are dropped here; the rest hold nothing to free and are
/// forgotten (which is safe: forgetting releases no memory and runs no code).
fn clear_values(values: &mut Vec<Option<Value<'_>>>) {
    for v in values.drain(..).flatten() {
        release(v);
    }
}

/// Fills a slot [`clear_values`] left empty. `*slot = Some(v)` would call `Value`'s drop glue
/// on the `None` it replaces, out of line; what it replaced is released instead.
#[inline]
fn put<'r>(slot: &mut Option<Value<'r>>, v: Value<'r>) {
    if let Some(old) = slot.replace(v) {
        release(old);
    }
}

/// Drops a value that owns memory and forgets one that does not, without the drop glue's
/// out-of-line call (see [`clear_values`]).
#[inline]
fn release(v: Value<'_>) {
    if owns_memory(&v) {
        drop(v);
    } else {
        std::mem::forget(v);
    }
}

/// True for the values that own heap memory. Exhaustive on purpose: a new variant must say.
fn owns_memory(v: &Value<'_>) -> bool {
    match v {
        Value::Bytes(b) => matches!(b, Cow::Owned(_)),
        Value::Json(_) | Value::JsonDiff(_) => true,
        Value::Null
        | Value::Int(_)
        | Value::UInt(_)
        | Value::Float(_)
        | Value::Double(_)
        | Value::Decimal(_)
        | Value::Year(_)
        | Value::Date(_)
        | Value::Time(_)
        | Value::DateTime(_)
        | Value::Timestamp(_)
        | Value::Text { .. }
        | Value::Enum(_)
        | Value::Set(_)
        | Value::Bit { .. }
        | Value::Geometry { .. }
        | Value::Vector(_) => false,
    }
}

/// Reads a partial JSON value (a diff vector, length-prefixed like a JSON value) and applies it
/// to the before image's document when there is one.
fn read_partial_json<'r>(r: &mut Reader<'r>, meta: u16, before: Option<&Value<'r>>) -> Result<Value<'r>> {
    let len = r.uint_le(usize::from(meta), "partial JSON length")?;
    let bytes = r.take_u64(len, "partial JSON diffs")?;
    let diffs = jsonb::read_json_diffs(bytes)?;
    match before {
        Some(Value::Json(doc)) => {
            let mut doc = doc.clone();
            jsonb::apply_diffs(&mut doc, &diffs)?;
            Ok(Value::Json(doc))
        }
        _ => Ok(Value::JsonDiff(diffs)),
    }
}

/// Iterator over the row changes of a [`RowsEvent`]; stops after the first error.
#[derive(Debug)]
pub struct RowsIter<'r> {
    ev: &'r RowsEvent<'r>,
    r: Reader<'r>,
    done: bool,
}

impl<'r> RowsIter<'r> {
    /// Decodes the next row change into `change`, reusing the image vectors it already holds
    /// (the allocation-free way to walk many rows: one `RowChange` per event, refilled per
    /// row). Returns `None` after the last row; stops after the first error, as the iterator
    /// does. On an error `change` holds no partial image.
    pub fn next_into(&mut self, change: &mut RowChange<'r>) -> Option<Result<()>> {
        if self.done || self.r.is_empty() {
            return None;
        }
        let ev = self.ev;
        let start = self.r.position();
        let r = &mut self.r;
        let res = match ev.kind {
            RowsKind::Write => {
                change.before = None;
                ev.read_image_slot(r, false, None, &mut change.after)
            }
            RowsKind::Delete => {
                change.after = None;
                ev.read_image_slot(r, true, None, &mut change.before)
            }
            RowsKind::Update | RowsKind::PartialUpdate => ev
                .read_image_slot(r, true, None, &mut change.before)
                .and_then(|()| ev.read_image_slot(r, false, change.before.as_ref(), &mut change.after)),
        };
        let res = self.settle(start, res);
        if res.is_err() {
            change.before = None;
            change.after = None;
        }
        Some(res)
    }

    /// Reads the next row change, handing its images to `visitor` value by value as they are
    /// decoded, without collecting them: what a caller that turns each value into something
    /// else at once (`sluice dump`'s JSON) needs, and cheaper than [`RowsIter::next_into`],
    /// whose values go through a vector. Returns `None` after the last row; stops after the
    /// first error, as the iterator does: the visitor may then have seen part of the change.
    pub fn next_with(&mut self, visitor: &mut impl ImageVisitor<'r>) -> Option<Result<()>> {
        if self.done || self.r.is_empty() {
            return None;
        }
        let ev = self.ev;
        if ev.kind == RowsKind::PartialUpdate {
            // a partial JSON after image applies to the before image's values: collected
            let mut change = RowChange { before: None, after: None };
            return self.next_into(&mut change).map(|res| {
                res.map(|()| {
                    for (before, image) in [(true, change.before), (false, change.after)] {
                        if let Some(image) = image {
                            visitor.image(before);
                            for (i, value) in image.values.into_iter().enumerate() {
                                if let Some(value) = value {
                                    visitor.value(i, &value);
                                }
                            }
                        }
                    }
                })
            });
        }
        let start = self.r.position();
        let r = &mut self.r;
        let mut image = |r: &mut Reader<'r>, before: bool| {
            visitor.image(before);
            let (present, count) = ev.present(before);
            // let go in `walk_image` without `Value`'s out-of-line drop glue (3.5% of `sluice
            // dump`'s CPU), nor a look at each value's variant
            ev.walk_image::<true>(r, present, count, None, visitor, |_, value| release(value))
        };
        let res = match ev.kind {
            RowsKind::Write => image(r, false),
            RowsKind::Delete => image(r, true),
            RowsKind::Update | RowsKind::PartialUpdate => image(r, true).and_then(|()| image(r, false)),
        };
        Some(self.settle(start, res))
    }

    /// A row change's outcome, read from `start`: an error stops the walk.
    fn settle(&mut self, start: usize, res: Result<()>) -> Result<()> {
        // A row change that reads no bytes (no column present in its images) would be
        // returned forever: every image the server writes holds at least its NULL bitmap
        // byte, so bytes left behind such a change are malformed row data, not more rows.
        let res = res.and_then(|()| {
            if self.r.position() == start {
                Err(Error::invalid(
                    "rows event",
                    format!(
                        "a row image with no columns present cannot account for the {} bytes of row data left",
                        self.r.remaining()
                    ),
                ))
            } else {
                Ok(())
            }
        });
        if res.is_err() {
            self.done = true;
        }
        res
    }
}

/// Receives a row change's images value by value from [`RowsIter::next_with`].
pub trait ImageVisitor<'r> {
    /// An image starts: the before image (`before`) or the after image; an UPDATE's before
    /// image comes first.
    fn image(&mut self, before: bool);
    /// A value of the image begun last: its column's index and the value, in column order
    /// (columns the image leaves out are skipped; SQL NULL is [`Value::Null`]). Lent, not
    /// given: the walk drops it without the drop glue's call for the values that own nothing.
    fn value(&mut self, column: usize, value: &Value<'r>);
    /// Reads the values of a full image itself from column `from` on, as far as it can: straight
    /// from their bytes (or SQL NULL, where `nulls`, the image's NULL bitmap indexed by column,
    /// says) to what the visitor makes of them. Returns the first column it did not read
    /// (`columns.len()` when it read them all), `r` past the values it read: the walk decodes
    /// that column's value and gives it to [`ImageVisitor::value`], then asks again from the
    /// next. For a visitor that turns the commonest values into something else without
    /// [`Value`]'s two dispatches (the record path's Avro: `sluice::avro::fused`); what it makes
    /// of a value must be what `value` makes of the decoded value. By default, none.
    #[inline(always)]
    fn raw_run(&mut self, from: usize, _columns: &[Column], _nulls: &[u8], _r: &mut Reader<'r>) -> usize {
        from
    }
}

/// The visitor of a walk that keeps the values (`walk_image::<false>`): never called.
struct NoVisitor;

impl<'r> ImageVisitor<'r> for NoVisitor {
    fn image(&mut self, _before: bool) {}
    fn value(&mut self, _column: usize, _value: &Value<'r>) {}
}

impl<'r> Iterator for RowsIter<'r> {
    type Item = Result<RowChange<'r>>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut change = RowChange { before: None, after: None };
        self.next_into(&mut change).map(|res| res.map(|()| change))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `db.t` with one nullable INT column.
    fn one_int_table() -> Arc<TableMap> {
        let body = [
            1, 0, 0, 0, 0, 0, // table id 1
            0, 0, // flags
            2, b'd', b'b', 0, // database "db"
            1, b't', 0,    // table "t"
            1,    // column count
            3,    // LONG
            0,    // no metadata
            0x01, // nullable bitmap
        ];
        Arc::new(TableMap::parse(&body, 8, crate::table_map::Writer::Mysql).unwrap())
    }

    /// Found by the mutation test (a flipped bit in a WRITE_ROWS columns-present bitmap):
    /// no column present makes every row image zero bytes long, and the iterator returned
    /// the same empty row forever instead of reporting the bytes it could not read.
    #[test]
    fn rows_with_no_present_column_do_not_loop() {
        let body = [
            1, 0, 0, 0, 0, 0, // table id 1
            1, 0,    // flags: STMT_END_F
            1,    // column count
            0x00, // columns present: none
            0x00, 0x2a, 0, 0, 0, // row data that no image accounts for
        ];
        let table = one_int_table();
        let ev = RowsEvent::parse(EventType::WriteRowsV1, &body, 8, &|_| Some(Arc::clone(&table)), |_| {
            unreachable!("not compressed")
        })
        .unwrap();
        let rows: Vec<_> = ev.rows().take(3).collect();
        assert_eq!(rows.len(), 1, "{rows:?}");
        let e = rows[0].as_ref().unwrap_err().to_string();
        assert!(e.contains("no columns present") && e.contains("5 bytes"), "{e}");
    }

    #[test]
    fn one_row_is_read() {
        let body = [1, 0, 0, 0, 0, 0, 1, 0, 1, 0x01, 0x00, 0x2a, 0, 0, 0];
        let table = one_int_table();
        let ev = RowsEvent::parse(EventType::WriteRowsV1, &body, 8, &|_| Some(Arc::clone(&table)), |_| unreachable!())
            .unwrap();
        let rows: Vec<_> = ev.rows().collect::<Result<_>>().unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].after.as_ref().unwrap().values, vec![Some(Value::Int(42))]);
    }

    /// A value cut short names its table, column and byte, on the full-image path (every
    /// column present) and on the other one (a MINIMAL image: only the first of two columns).
    #[test]
    fn a_truncated_value_names_table_and_column() {
        let two_ints = Arc::new(
            TableMap::parse(
                &[1, 0, 0, 0, 0, 0, 0, 0, 2, b'd', b'b', 0, 1, b't', 0, 2, 3, 3, 0, 0x03],
                8,
                crate::table_map::Writer::Mysql,
            )
            .unwrap(),
        );
        for (table, what) in [(one_int_table(), "full image"), (two_ints, "partial image")] {
            // columns present: the first; NULL bitmap: none; then 2 of the INT's 4 bytes
            let body = [1, 0, 0, 0, 0, 0, 1, 0, table.columns.len() as u8, 0x01, 0x00, 0x2a, 0];
            let ev =
                RowsEvent::parse(EventType::WriteRowsV1, &body, 8, &|_| Some(Arc::clone(&table)), |_| unreachable!())
                    .unwrap();
            let e = ev.rows().next().unwrap().unwrap_err().to_string();
            assert!(e.contains("db.t") && e.contains("column 1") && e.contains("INT"), "{what}: {e}");
        }
    }

    /// BINARY(255) values the binlog stores as one byte come back as 255: the event's bound
    /// on its value bytes still holds for both images of an UPDATE.
    #[test]
    fn the_value_bytes_bound_covers_binary_padding() {
        let mut col = Column::new(0, ColumnType::String, 255, false);
        col.collation = Some(crate::charset::BINARY_COLLATION);
        let table = Arc::new(TableMap {
            table_id: 1,
            flags: 0,
            database: Arc::from("db"),
            table: Arc::from("t"),
            columns: vec![col],
            has_column_names: false,
            primary_key: None,
        });
        // UPDATE v1, both images present; each: no NULL, a 1-byte value
        let body = [1, 0, 0, 0, 0, 0, 1, 0, 1, 0x01, 0x01, 0x00, 1, b'a', 0x00, 1, b'b'];
        let ev = RowsEvent::parse(EventType::UpdateRowsV1, &body, 8, &|_| Some(Arc::clone(&table)), |_| unreachable!())
            .unwrap();
        let row = ev.rows().next().unwrap().unwrap();
        let bytes: usize = [row.before.unwrap(), row.after.unwrap()]
            .iter()
            .flat_map(|img| img.values.iter().flatten())
            .map(|v| match v {
                Value::Bytes(b) => b.len(),
                other => panic!("not bytes: {other:?}"),
            })
            .sum();
        assert_eq!(bytes, 510);
        assert!(bytes <= ev.value_bytes_bound(), "{bytes} > {}", ev.value_bytes_bound());
    }

    /// A detached event reads the same rows after the buffer it was parsed from is gone.
    #[test]
    fn a_detached_event_outlives_its_buffer() {
        let table = one_int_table();
        let detached = {
            // UPDATE v2: extra data of 2 bytes (its length only), both images present, 7 -> NULL
            let body: Vec<u8> = vec![1, 0, 0, 0, 0, 0, 1, 0, 2, 0, 1, 0x01, 0x01, 0x00, 7, 0, 0, 0, 0x01];
            let ev =
                RowsEvent::parse(EventType::UpdateRowsV2, &body, 8, &|_| Some(Arc::clone(&table)), |_| unreachable!())
                    .unwrap();
            let d = ev.detached();
            drop(ev);
            drop(body);
            d
        };
        let rows: Vec<_> = detached.rows().collect::<Result<_>>().unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].before.as_ref().unwrap().values, vec![Some(Value::Int(7))]);
        assert_eq!(rows[0].after.as_ref().unwrap().values, vec![Some(Value::Null)]);
        assert_eq!((detached.kind, detached.flags), (RowsKind::Update, 1));
    }
}
