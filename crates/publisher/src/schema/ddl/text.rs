//! DDL as text, before and beside the parser: the cheap pre-filter that keeps account
//! statements (and their passwords) away from parsing and logs, tokens, the options-only
//! `ALTER TABLE` recognised without a parse, and the rewrites of what MariaDB accepts and
//! sqlparser does not, into what it parses. [`super`] applies what parses.

use sqlparser::ast::Statement;
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};

use super::{charset_of_collation_name, unquote};

/// The statement without a trailing `START TRANSACTION`.
pub(in crate::schema) fn strip_start_transaction(sql: &str) -> &str {
    let t = sql.trim_end().trim_end_matches(';').trim_end();
    let n = "START TRANSACTION".len();
    match t.len().checked_sub(n).and_then(|i| Some((i, t.get(i..)?))) {
        Some((i, tail)) if tail.eq_ignore_ascii_case("START TRANSACTION") => t.get(..i).unwrap_or(t).trim_end(),
        _ => sql,
    }
}

/// Parses with sqlparser's MySQL dialect; MariaDB extensions it lacks (`ADD COLUMN IF NOT
/// EXISTS`, ...) get a second try with its generic dialect, which accepts them along with
/// MySQL's backticks and column positions.
pub(in crate::schema) fn parse(sql: &str) -> Result<Vec<Statement>, sqlparser::parser::ParserError> {
    Parser::parse_sql(&MySqlDialect {}, sql)
        .or_else(|e| Parser::parse_sql(&sqlparser::dialect::GenericDialect {}, sql).map_err(|_| e))
}

/// A cheap pre-filter: only statements that may change a table's columns are parsed.
pub(in crate::schema) fn looks_like_ddl(sql: &str) -> bool {
    // most statements say what they are in their first word; comments and the like go through
    // the tokenizer
    let plain: Vec<String> = sql
        .split_ascii_whitespace()
        .take(4)
        .map(|w| w.chars().take_while(char::is_ascii_alphabetic).collect())
        .collect();
    if plain.first().is_some_and(|w| !w.is_empty()) {
        return table_statement(&plain);
    }
    let Ok(tokens) = Tokenizer::new(&MySqlDialect {}, sql).tokenize() else {
        // cannot even tokenize: let the parser report it when it names a captured table
        return true;
    };
    let mut words = tokens.iter().filter_map(|t| match t {
        Token::Word(w) => Some(w.value.to_ascii_uppercase()),
        _ => None,
    });
    table_statement(&words.by_ref().take(4).collect::<Vec<_>>())
}

/// True for a statement that may change tables, by its first two words. Account and server
/// statements (`CREATE USER ... IDENTIFIED BY 'secret'`, `ALTER USER`, `CREATE SERVER ...
/// PASSWORD`) never do, and carry passwords in clear text in the binlog: they are not parsed,
/// so their text is never in a log line or a schema-history record.
pub(in crate::schema) fn table_statement(words: &[String]) -> bool {
    let word = |i: usize| words.get(i).map(|w| w.to_ascii_uppercase()).unwrap_or_default();
    // `CREATE OR REPLACE USER`: the object is the fourth word
    let object = if word(1) == "OR" { word(3) } else { word(1) };
    matches!(word(0).as_str(), "CREATE" | "ALTER" | "RENAME" | "DROP")
        && !matches!(object.as_str(), "USER" | "ROLE" | "SERVER")
}

/// A statement's tokens without whitespace and comments (None when it does not tokenize).
pub(in crate::schema) fn tokens(sql: &str) -> Option<Vec<Token>> {
    Some(
        Tokenizer::new(&MySqlDialect {}, sql)
            .tokenize()
            .ok()?
            .into_iter()
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .collect(),
    )
}

/// What [`options_only_alter`] found.
#[derive(Debug, PartialEq)]
pub(in crate::schema) struct OptionsAlter {
    pub(in crate::schema) db: String,
    pub(in crate::schema) table: String,
    /// A new default charset (`DEFAULT CHARSET=x`, `COLLATE=y`).
    pub(in crate::schema) charset: Option<String>,
    /// `CONVERT TO CHARACTER SET x`: every character column becomes `x` too.
    pub(in crate::schema) convert_to: Option<String>,
}

/// For an `ALTER TABLE` whose every specification leaves the column list alone (table
/// options, index changes, partition maintenance, `CONVERT TO CHARACTER SET`), what it
/// changes; None for anything else.
pub(in crate::schema) fn options_only_alter(
    sql: &str,
    default_db: &str,
    db_charset: Option<&str>,
) -> Option<OptionsAlter> {
    let tokens = tokens(sql)?;
    let word = |i: usize| match tokens.get(i) {
        Some(Token::Word(w)) => Some(w.value.to_ascii_uppercase()),
        _ => None,
    };
    let mut i = 0;
    if word(i).as_deref() != Some("ALTER") {
        return None;
    }
    i += 1;
    while matches!(word(i).as_deref(), Some("ONLINE" | "IGNORE")) {
        i += 1;
    }
    if word(i).as_deref() != Some("TABLE") {
        return None;
    }
    i += 1;
    if word(i).as_deref() == Some("IF") {
        i += 2; // IF EXISTS
    }
    let name = |i: usize| match tokens.get(i) {
        Some(Token::Word(w)) => Some(w.value.clone()),
        _ => None,
    };
    let (db, table) = if tokens.get(i + 1) == Some(&Token::Period) {
        let r = (name(i)?, name(i + 2)?);
        i += 3;
        r
    } else {
        if default_db.is_empty() {
            return None;
        }
        let r = (default_db.to_string(), name(i)?);
        i += 1;
        r
    };
    // specifications, split at commas outside parentheses
    let mut specs: Vec<Vec<&Token>> = vec![Vec::new()];
    let mut depth = 0i32;
    for t in tokens.get(i..).unwrap_or_default() {
        match t {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => {
                specs.push(Vec::new());
                continue;
            }
            Token::SemiColon if depth == 0 => break,
            _ => {}
        }
        if let Some(last) = specs.last_mut() {
            last.push(t);
        }
    }
    // MariaDB's `WAIT n` / `NOWAIT` (lock timeout) precede the specifications
    if let Some(first) = specs.first_mut() {
        match first.first() {
            Some(Token::Word(w)) if w.value.eq_ignore_ascii_case("NOWAIT") => {
                first.remove(0);
            }
            Some(Token::Word(w)) if w.value.eq_ignore_ascii_case("WAIT") && first.len() >= 2 => {
                first.drain(..2);
            }
            _ => {}
        }
    }
    let mut charset = None;
    let mut convert_to = None;
    // `DROP PARTITION p0, p1`: the names after the first are specifications of their own
    let mut partition_names = false;
    for spec in &specs {
        let words: Vec<String> = spec
            .iter()
            .map(|t| match t {
                Token::Word(w) => w.value.to_ascii_uppercase(),
                other => other.to_string(),
            })
            .collect();
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        let value = || {
            let after = w.iter().position(|x| *x == "=").map_or(w.len().saturating_sub(1), |p| p + 1);
            w.get(after).map(|v| unquote(v).to_ascii_lowercase())
        };
        let names_follow = matches!(
            w.as_slice(),
            [
                "DROP" | "TRUNCATE" | "ANALYZE" | "CHECK" | "OPTIMIZE" | "REBUILD" | "REPAIR" | "DISCARD" | "IMPORT",
                "PARTITION",
                ..
            ]
        );
        if partition_names && matches!(w.as_slice(), [_]) && matches!(spec.first(), Some(Token::Word(_))) {
            continue;
        }
        partition_names = names_follow;
        match w.as_slice() {
            ["ENGINE"
            | "COMMENT"
            | "FORCE"
            | "ROW_FORMAT"
            | "KEY_BLOCK_SIZE"
            | "AUTO_INCREMENT"
            | "ALGORITHM"
            | "LOCK"
            | "STATS_PERSISTENT"
            | "STATS_AUTO_RECALC"
            | "STATS_SAMPLE_PAGES"
            | "PACK_KEYS"
            | "CHECKSUM"
            | "DELAY_KEY_WRITE"
            | "MAX_ROWS"
            | "MIN_ROWS"
            | "AVG_ROW_LENGTH"
            | "ENCRYPTION"
            | "COMPRESSION"
            | "PAGE_CHECKSUM"
            | "TRANSACTIONAL"
            | "PAGE_COMPRESSED"
            | "PAGE_COMPRESSION_LEVEL"
            | "ORDER"
            | "ENABLE"
            | "DISABLE", ..]
            | ["RENAME", "INDEX" | "KEY", ..]
            | ["DROP", "INDEX" | "KEY" | "FOREIGN" | "CHECK" | "CONSTRAINT", ..]
            | ["ADD", "INDEX" | "KEY" | "UNIQUE" | "FULLTEXT" | "SPATIAL" | "FOREIGN" | "CONSTRAINT" | "CHECK", ..]
            | ["ALTER", "INDEX", ..]
            // application-time periods name existing columns
            | ["ADD" | "DROP", "PERIOD", ..]
            // partition maintenance moves rows between partitions, never changes the columns
            | ["ADD" | "DROP" | "DISCARD" | "IMPORT", "PARTITION", ..]
            | ["TRUNCATE" | "COALESCE" | "REORGANIZE" | "EXCHANGE" | "ANALYZE" | "CHECK" | "OPTIMIZE" | "REBUILD"
            | "REPAIR" | "CONVERT", "PARTITION", ..]
            | ["PARTITION", "BY", ..]
            | ["REMOVE", "PARTITIONING"]
            | ["DISCARD" | "IMPORT", "TABLESPACE"] => {}
            ["CONVERT", "TO", "CHARACTER", "SET", cs, rest @ ..] | ["CONVERT", "TO", "CHARSET", cs, rest @ ..] => {
                convert_to = if cs.eq_ignore_ascii_case("DEFAULT") {
                    // the database's charset, which the QUERY event carries
                    Some(db_charset?.to_string())
                } else {
                    Some(unquote(cs).to_ascii_lowercase())
                };
                if let ["COLLATE", "=", c] | ["COLLATE", c] = rest {
                    convert_to = Some(charset_of_collation_name(&unquote(c)));
                } else if !rest.is_empty() {
                    return None;
                }
            }
            ["DEFAULT", "CHARSET" | "CHARACTER", ..] | ["CHARSET" | "CHARACTER", ..] => charset = value(),
            ["DEFAULT", "COLLATE", ..] | ["COLLATE", ..] => charset = value().map(|c| charset_of_collation_name(&c)),
            [] if specs.len() == 1 => {}
            _ => return None,
        }
        // an added constraint named PRIMARY changes the key: not harmless
        if w.contains(&"PRIMARY") {
            return None;
        }
    }
    Some(OptionsAlter { db, table, charset, convert_to })
}

/// The tokens of `sql`, each with its text as written (quotes and escapes intact), so a
/// rewrite can drop or move tokens without re-printing them. None when it does not tokenize.
pub(in crate::schema) fn spanned_tokens(sql: &str) -> Option<Vec<(Token, &str)>> {
    let tokens = Tokenizer::new(&MySqlDialect {}, sql).tokenize_with_location().ok()?;
    // the tokenizer counts lines from 1 and columns in characters from 1
    let mut line_starts = vec![0usize];
    line_starts.extend(sql.match_indices('\n').map(|(i, _)| i + 1));
    let offset = |line: u64, column: u64| -> Option<usize> {
        let start = *line_starts.get(usize::try_from(line).ok()?.checked_sub(1)?)?;
        let skip = usize::try_from(column).ok()?.checked_sub(1)?;
        let rest = sql.get(start..)?;
        Some(start + rest.char_indices().nth(skip).map_or(rest.len(), |(i, _)| i))
    };
    let starts: Vec<usize> =
        tokens.iter().map(|t| offset(t.span.start.line, t.span.start.column)).collect::<Option<_>>()?;
    let mut out = Vec::with_capacity(tokens.len());
    for (i, t) in tokens.into_iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(sql.len());
        out.push((t.token, sql.get(*starts.get(i)?..end)?));
    }
    Some(out)
}

/// MySQL and MariaDB DDL that sqlparser does not parse, rewritten into the equivalent it
/// does; None when there is nothing to rewrite (or it does not tokenize):
///
/// - `ALTER ONLINE TABLE` / `ALTER IGNORE TABLE` -> `ALTER TABLE` (how, not what);
/// - `ALTER TABLE t WAIT n ...` / `NOWAIT` (MariaDB's lock timeout) dropped;
/// - `ADD [COLUMN] (a INT, b INT)` -> `ADD COLUMN a INT, ADD COLUMN b INT` (both append);
/// - `CREATE TABLE ... PARTITION BY ...`: the partitioning dropped (it places rows, it
///   does not shape them);
/// - the `BINARY` attribute of a character type (`CHAR(3) BINARY`: its charset's binary
///   collation, still text in that charset) dropped;
/// - the other spellings of types, as the server stores them: `NATIONAL VARCHAR(n)`,
///   `NVARCHAR(n)`, `NCHAR VARCHAR(n)`, `NATIONAL CHARACTER VARYING(n)` -> `VARCHAR(n)
///   CHARACTER SET utf8mb3` (and `NCHAR(n)`, `NATIONAL CHAR(n)` -> `CHAR(n) ...`: the national
///   character set is utf8mb3 on MySQL and MariaDB); `CHARACTER VARYING(n)` -> `VARCHAR(n)`;
///   `LONG VARBINARY` -> `MEDIUMBLOB`; `LONG VARCHAR` and `LONG` -> `MEDIUMTEXT`;
/// - column attributes that do not shape the values: `COLUMN_FORMAT x`, `STORAGE x`,
///   `REF_SYSTEM_ID=n`, a column's `WITH[OUT] SYSTEM VERSIONING` (in ALTER, and inside a
///   CREATE's column list: the table-level one adds hidden columns and is left to fail) dropped;
///   `SERIAL DEFAULT VALUE` -> `NOT NULL AUTO_INCREMENT UNIQUE`; `ASCII` -> `CHARACTER SET
///   latin1` and `UNICODE` -> `CHARACTER SET ucs2` after a character type;
/// - MariaDB's `ADD INDEX IF NOT EXISTS` and `CHANGE|MODIFY [COLUMN] IF EXISTS`: the condition
///   dropped (the server logs the statement as written, also when it skipped the change: a
///   column that is not there then fails to apply, and the table is marked unknown);
/// - MariaDB's sequence defaults `DEFAULT NEXT VALUE FOR s` / `NEXTVAL(s)`: a default does not
///   shape the values, so `DEFAULT NULL` stands in.
pub(in crate::schema) fn rewrite_for_parser(sql: &str) -> Option<String> {
    let tokens = spanned_tokens(sql)?;
    let is_word = |i: usize, k: &str| matches!(tokens.get(i), Some((Token::Word(w), _)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(k));
    // indexes of the significant tokens
    let sig: Vec<usize> = (0..tokens.len()).filter(|&i| !matches!(tokens[i].0, Token::Whitespace(_))).collect();
    let w = |k: usize, s: &str| sig.get(k).is_some_and(|&i| is_word(i, s));
    let mut drop = vec![false; tokens.len()];
    // replacement text for a token (the token's own text is not kept)
    let mut replace: Vec<Option<String>> = vec![None; tokens.len()];
    // text written after a token
    let mut append: Vec<Option<&str>> = vec![None; tokens.len()];
    let alter = w(0, "ALTER");
    let create = w(0, "CREATE");
    let mut k = 1;
    if alter {
        while w(k, "ONLINE") || w(k, "IGNORE") {
            drop[sig[k]] = true;
            k += 1;
        }
        if !w(k, "TABLE") {
            return None;
        }
        k += 1;
        if w(k, "IF") && w(k + 1, "EXISTS") {
            k += 2;
        }
        k += 1; // the name
        if sig.get(k).is_some_and(|&i| tokens[i].0 == Token::Period) {
            k += 2;
        }
        if w(k, "NOWAIT") {
            drop[sig[k]] = true;
        } else if w(k, "WAIT") && sig.get(k + 1).is_some() {
            drop[sig[k]] = true;
            drop[sig[k + 1]] = true;
        }
    }
    let mut depth = 0i32;
    let mut partition_from: Option<usize> = None;
    let mut j = 0;
    while j < sig.len() {
        let i = sig[j];
        match &tokens[i].0 {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ => {}
        }
        // ADD [COLUMN] (defs) at the top level of an ALTER TABLE
        if alter && depth == 0 && w(j, "ADD") {
            let mut open = if w(j + 1, "COLUMN") { j + 2 } else { j + 1 };
            let if_not_exists = w(open, "IF") && w(open + 1, "NOT") && w(open + 2, "EXISTS");
            if if_not_exists {
                open += 3;
            }
            if sig.get(open).is_some_and(|&o| tokens[o].0 == Token::LParen) {
                let (mut d, mut defs, mut cur, mut end) = (0i32, Vec::new(), String::new(), None);
                for (n, &t) in sig.iter().enumerate().skip(open) {
                    match tokens[t].0 {
                        Token::LParen => d += 1,
                        Token::RParen => d -= 1,
                        _ => {}
                    }
                    if d == 0 {
                        end = Some(n);
                        break;
                    }
                    if tokens[t].0 == Token::Comma && d == 1 {
                        defs.push(std::mem::take(&mut cur));
                    } else if n > open {
                        cur.push_str(tokens[t].1);
                        // keep the whitespace that follows inside the definition
                        let mut ws = t + 1;
                        while ws < tokens.len() && matches!(tokens[ws].0, Token::Whitespace(_)) {
                            cur.push_str(tokens[ws].1);
                            ws += 1;
                        }
                    }
                }
                let end = end?;
                defs.push(cur);
                let add = if if_not_exists { "ADD COLUMN IF NOT EXISTS" } else { "ADD COLUMN" };
                let text: Vec<String> = defs.iter().map(|d| format!("{add} {}", d.trim())).collect();
                replace[sig[j]] = Some(text.join(", ") + " ");
                for &t in sig.get(j + 1..=end)? {
                    drop[t] = true;
                }
                // the whitespace inside the list goes with it
                for t in sig[j]..=sig[end] {
                    if matches!(tokens[t].0, Token::Whitespace(_)) {
                        drop[t] = true;
                    }
                }
                j = end + 1;
                continue;
            }
        }
        if create && depth == 0 && partition_from.is_none() && w(j, "PARTITION") && w(j + 1, "BY") {
            partition_from = Some(j);
        }
        if partition_from.is_some() && depth == 0 && (w(j, "SELECT") || w(j, "AS")) {
            for &t in sig.get(partition_from?..j)? {
                drop[t] = true;
            }
            partition_from = None;
        }
        // another spelling of a type: where a type can start, after a column's name (an
        // identifier, not ADD/COLUMN/MODIFY/... nor a comma or parenthesis, where the word
        // would be the name itself)
        let after_name = j >= 1
            && matches!(&tokens[sig[j - 1]].0, Token::Word(w) if w.quote_style.is_some()
                || !["ADD", "COLUMN", "MODIFY", "CHANGE", "TABLE", "EXISTS", "FIRST", "AFTER", "BY", "KEY", "INDEX", "ON", "DROP", "RENAME", "TO", "AS"]
                    .iter()
                    .any(|k| w.value.eq_ignore_ascii_case(k)));
        if after_name {
            let national = w(j, "NATIONAL") || w(j, "NCHAR") || w(j, "NVARCHAR");
            let char_word = |k: usize| w(k, "CHAR") || w(k, "CHARACTER");
            let spelled: Option<(usize, &str)> = if w(j, "NATIONAL") && char_word(j + 1) && w(j + 2, "VARYING") {
                Some((3, "VARCHAR"))
            } else if w(j, "NATIONAL") && w(j + 1, "VARCHAR") {
                Some((2, "VARCHAR"))
            } else if w(j, "NATIONAL") && char_word(j + 1) {
                Some((2, "CHAR"))
            } else if w(j, "NCHAR") && (w(j + 1, "VARCHAR") || w(j + 1, "VARYING")) {
                Some((2, "VARCHAR"))
            } else if w(j, "NVARCHAR") {
                Some((1, "VARCHAR"))
            } else if w(j, "NCHAR") {
                Some((1, "CHAR"))
            } else if char_word(j) && w(j + 1, "VARYING") {
                Some((2, "VARCHAR"))
            } else if w(j, "LONG") && w(j + 1, "VARBINARY") {
                Some((2, "MEDIUMBLOB"))
            } else if w(j, "LONG") && w(j + 1, "VARCHAR") {
                Some((2, "MEDIUMTEXT"))
            } else if w(j, "LONG") {
                Some((1, "MEDIUMTEXT"))
            } else {
                None
            };
            if let Some((n, canonical)) = spelled {
                replace[sig[j]] = Some(canonical.to_string());
                for &t in sig.get(j + 1..j + n)? {
                    drop[t] = true;
                }
                if national {
                    // after the length, if any: `VARCHAR(10) CHARACTER SET utf8mb3`
                    let mut end = j + n - 1;
                    if sig.get(end + 1).is_some_and(|&t| tokens[t].0 == Token::LParen) {
                        end = (end + 1..sig.len()).find(|&k| tokens[sig[k]].0 == Token::RParen)?;
                    }
                    append[sig[end]] = Some(" CHARACTER SET utf8mb3");
                }
                j += n;
                continue;
            }
        }
        // column attributes that leave the values as they are
        let in_columns = (alter && depth == 0) || (create && depth == 1);
        let drop_n = |n: usize, drop: &mut Vec<bool>| -> Option<()> {
            for &t in sig.get(j..j + n)? {
                drop[t] = true;
            }
            Some(())
        };
        if in_columns && (w(j, "COLUMN_FORMAT") || w(j, "STORAGE")) && sig.get(j + 1).is_some() {
            drop_n(2, &mut drop)?;
            j += 2;
            continue;
        }
        if in_columns && w(j, "REF_SYSTEM_ID") {
            let n = if sig.get(j + 1).is_some_and(|&t| tokens[t].0 == Token::Eq) { 3 } else { 2 };
            drop_n(n, &mut drop)?;
            j += n;
            continue;
        }
        if in_columns
            && (w(j, "WITH") || w(j, "WITHOUT"))
            && w(j + 1, "SYSTEM")
            && w(j + 2, "VERSIONING")
            && j >= 1
            && !matches!(tokens[sig[j - 1]].0, Token::Comma)
        {
            drop_n(3, &mut drop)?;
            j += 3;
            continue;
        }
        if in_columns && w(j, "SERIAL") && w(j + 1, "DEFAULT") && w(j + 2, "VALUE") {
            replace[sig[j]] = Some("NOT NULL AUTO_INCREMENT UNIQUE".into());
            drop[sig[j + 1]] = true;
            drop[sig[j + 2]] = true;
            j += 3;
            continue;
        }
        if alter && depth == 0 && (w(j, "CHANGE") || w(j, "MODIFY")) {
            let k = if w(j + 1, "COLUMN") { j + 2 } else { j + 1 };
            if w(k, "IF") && w(k + 1, "EXISTS") {
                drop[sig[k]] = true;
                drop[sig[k + 1]] = true;
                j = k + 2;
                continue;
            }
        }
        if in_columns && w(j, "DEFAULT") && w(j + 1, "NEXT") && w(j + 2, "VALUE") && w(j + 3, "FOR") {
            // the sequence's name, qualified or not
            let mut end = j + 4;
            while sig.get(end + 1).is_some_and(|&t| tokens[t].0 == Token::Period) {
                end += 2;
            }
            replace[sig[j]] = Some("DEFAULT NULL".into());
            for &t in sig.get(j + 1..=end)? {
                drop[t] = true;
            }
            j = end + 1;
            continue;
        }
        if alter
            && depth == 0
            && (w(j, "INDEX") || w(j, "KEY"))
            && w(j + 1, "IF")
            && w(j + 2, "NOT")
            && w(j + 3, "EXISTS")
        {
            for &t in sig.get(j + 1..j + 4)? {
                drop[t] = true;
            }
            j += 4;
            continue;
        }
        if (w(j, "ASCII") || w(j, "UNICODE")) && j >= 1 {
            let p = sig[j - 1];
            let after_type = tokens[p].0 == Token::RParen
                || ["CHAR", "VARCHAR", "TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT"].iter().any(|t| is_word(p, t));
            if after_type {
                replace[i] = Some(if w(j, "ASCII") { "CHARACTER SET latin1" } else { "CHARACTER SET ucs2" }.into());
                j += 1;
                continue;
            }
        }
        // CHAR(n) BINARY, TEXT BINARY, ...: the attribute, not the BINARY(n) type
        if w(j, "BINARY") && sig.get(j + 1).is_none_or(|&n| tokens[n].0 != Token::LParen) && j >= 1 {
            let p = sig[j - 1];
            let after_type = tokens[p].0 == Token::RParen
                || ["CHAR", "VARCHAR", "TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT"].iter().any(|t| is_word(p, t));
            if after_type {
                drop[i] = true;
            }
        }
        j += 1;
    }
    if let Some(from) = partition_from {
        for &t in sig.get(from..)? {
            drop[t] = true;
        }
    }
    if !drop.iter().any(|d| *d) && replace.iter().all(Option::is_none) && append.iter().all(Option::is_none) {
        return None;
    }
    // a dropped word takes the whitespace after it along
    for i in 0..tokens.len().saturating_sub(1) {
        if drop[i] && !matches!(tokens[i].0, Token::Whitespace(_)) && matches!(tokens[i + 1].0, Token::Whitespace(_)) {
            drop[i + 1] = true;
        }
    }
    let mut out = String::with_capacity(sql.len());
    for (i, (_, text)) in tokens.iter().enumerate() {
        if let Some(r) = &replace[i] {
            out.push_str(r);
        } else if !drop[i] {
            out.push_str(text);
        }
        if let Some(a) = append[i] {
            out.push_str(a);
        }
    }
    Some(out)
}
