//! **A table read for comparison**: in key-ordered chunks by the snapshot's plan and its
//! binary-protocol values (so a row's values are what a snapshot would publish), each chunk
//! followed by the server's binlog position; and the rows of given keys, read again.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_protocol::query::ColumnDefinition;
use sluice_protocol::{ConnectOptions, Connection};

use super::VerifyError;
use crate::snapshot::plan::{self, TablePlan};
use crate::snapshot::values::sql_literal;
use crate::snapshot::{parse_row, reading_session, SnapshotError};

/// A chunk of rows.
pub(crate) struct Chunk {
    /// The rows' packets (parse with [`TableReader::values`]).
    pub rows: Vec<Bytes>,
    /// The result columns.
    pub columns: Arc<[ColumnDefinition]>,
    /// The chunk key of the last row (where the next chunk starts); None: the table's end.
    pub next: Option<Vec<String>>,
}

/// A connection reading one table.
pub(crate) struct TableReader {
    conn: Connection,
    /// What it reads and how.
    pub plan: TablePlan,
    chunk: usize,
}

impl TableReader {
    /// A reader of `db.table` (None: no such table), rows restricted by `filter` (SQL).
    ///
    /// # Errors
    /// The server cannot be reached, or the table cannot be read exactly.
    pub(crate) async fn open(
        connect: &ConnectOptions,
        name: (&str, &str),
        filter: Option<&str>,
        key_columns: Option<&[String]>,
        chunk: usize,
    ) -> Result<Option<TableReader>, VerifyError> {
        let mut conn = Connection::connect(connect.clone()).await.map_err(VerifyError::Source)?;
        reading_session(&mut conn, Duration::from_secs(10)).await.map_err(VerifyError::Source)?;
        let mariadb = conn.is_mariadb();
        let Some(plan) = plan::load(&mut conn, name.0, name.1, filter, key_columns, mariadb).await? else {
            return Ok(None);
        };
        Ok(Some(TableReader { conn, plan, chunk }))
    }

    /// The server's binlog position now.
    ///
    /// # Errors
    /// The server failing the query.
    pub(crate) async fn position(&mut self) -> Result<(String, u64), VerifyError> {
        crate::source::server::current_position(&mut self.conn)
            .await
            .map_err(|e| VerifyError::Other(format!("reading the source's binlog position: {e}")))
    }

    /// The chunk after `after` (None: the first).
    ///
    /// # Errors
    /// A failing query.
    pub(crate) async fn chunk(&mut self, after: Option<&[String]>) -> Result<Chunk, VerifyError> {
        let sql = self.plan.chunk_sql(after, self.chunk);
        let (rows, columns) = self.rows(&sql, "reading a chunk").await?;
        let next = if rows.len() < self.chunk {
            None
        } else {
            let last = rows.last().cloned().unwrap_or_default();
            let (mut raw, mut values) = (Vec::new(), Vec::new());
            parse_row(&self.plan, &columns, &last, &mut raw, &mut values)?;
            self.plan
                .key()
                .iter()
                .map(|&k| values.get(k).and_then(|v| v.as_ref()).and_then(sql_literal))
                .collect::<Option<Vec<String>>>()
        };
        Ok(Chunk { rows, columns, next })
    }

    /// The rows of these keys (chunk-key SQL literals), those that exist.
    ///
    /// # Errors
    /// A failing query.
    pub(crate) async fn rows_of(&mut self, keys: &[Vec<String>]) -> Result<Chunk, VerifyError> {
        let sql = self.plan.keys_sql(keys);
        let (rows, columns) = self.rows(&sql, "reading rows again by key").await?;
        Ok(Chunk { rows, columns, next: None })
    }

    async fn rows(
        &mut self,
        sql: &str,
        during: &'static str,
    ) -> Result<(Vec<Bytes>, Arc<[ColumnDefinition]>), VerifyError> {
        let name = self.plan.name.clone();
        let q = |source| VerifyError::Table(SnapshotError::Query { table: name.clone(), during, source });
        let prepared = self.conn.prepare(sql).await.map_err(q)?;
        let mut rs = self.conn.execute(&prepared).await.map_err(q)?;
        let columns: Arc<[ColumnDefinition]> = rs.columns().into();
        if columns.len() != self.plan.table_map.columns.len() {
            return Err(VerifyError::Other(format!(
                "{}: the table's columns changed while it was read (ALTER TABLE?): verify it again",
                self.plan.name
            )));
        }
        let mut rows = Vec::new();
        while let Some(packet) = rs.next_row().await.map_err(q)? {
            rows.push(packet);
        }
        self.conn.close_statement(&prepared).await.map_err(q)?;
        Ok((rows, columns))
    }
}
