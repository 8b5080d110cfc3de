#!/usr/bin/env python3
"""Runs integration/sql/workload.sql against a running MariaDB, one statement at a time, and writes what a
decoder test needs to check a decoded binlog against the server's own view of the data:

  expected-final.json         every table's rows at the end, as SELECT returns them (exact text)
  expected-transactions.json  per committed transaction (by GTID): the net row changes it made
  manifest.json               the binlog files copied, their sizes, sha256 and event-type census

Used by integration/record_workload.sh; see integration/README.md for the JSON formats.
Needs the `pymysql` package (record_workload.sh installs it when missing).
"""

import argparse
import collections
import hashlib
import json
import os
import shutil
import struct
import sys

import pymysql

DATABASE = "sluice_it"
HEX_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
GEOMETRY_TYPES = {
    "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
    "geometrycollection",
}
# In expected-transactions.json, values longer than this are replaced by their sha256 (keeps the file small);
# expected-final.json is always exact.
LONG_VALUE_CHARS = 4096


def connect(port):
    # conv={}: no client-side conversion; every value stays the text the server sent.
    return pymysql.connect(host="127.0.0.1", port=port, user="root", password="", charset="utf8mb4",
                           autocommit=True, conv={})


def text(v):
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray)):
        # Only numeric/temporal columns (ASCII) and HEX()/ST_AsText() results arrive as bytes here.
        return bytes(v).decode("utf-8")
    return v


def query(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return [tuple(text(x) for x in row) for row in cur.fetchall()]


def split_statements(path):
    """Yields ('sql', text) and ('reconnect', None) items in file order."""
    buf = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            stripped = line.strip()
            if not buf and stripped.startswith("--"):
                if stripped == "-- @reconnect":
                    yield ("reconnect", None)
                continue
            if not buf and not stripped:
                continue
            buf.append(line.rstrip("\n"))
            if stripped.endswith(";"):
                stmt = "\n".join(buf).strip()
                yield ("sql", stmt[:-1].rstrip())
                buf = []
    if buf:
        raise SystemExit(f"{path}: last statement is not terminated by ';'")


def quote_ident(name):
    return "`" + name.replace("`", "``") + "`"


def table_columns(conn, table):
    rows = query(conn, f"""
        SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, CHARACTER_SET_NAME
        FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '{DATABASE}' AND TABLE_NAME = '{table}'
        ORDER BY ORDINAL_POSITION""")
    cols = []
    for name, data_type, column_type, nullable, charset in rows:
        if data_type in HEX_TYPES:
            rep = "hex"
        elif data_type == "bit":
            rep = "bit_uint"
        elif data_type in GEOMETRY_TYPES:
            rep = "geometry"
        else:
            rep = "text"
        cols.append({"name": name, "data_type": data_type, "column_type": column_type,
                     "nullable": nullable == "YES", "charset": charset, "repr": rep})
    return cols


def primary_key(conn, table):
    rows = query(conn, f"""
        SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE
        WHERE TABLE_SCHEMA = '{DATABASE}' AND TABLE_NAME = '{table}' AND CONSTRAINT_NAME = 'PRIMARY'
        ORDER BY ORDINAL_POSITION""")
    return [r[0] for r in rows]


def select_table(conn, table):
    cols = table_columns(conn, table)
    pk = primary_key(conn, table)
    exprs = []
    for c in cols:
        q = quote_ident(c["name"])
        if c["repr"] == "hex":
            exprs.append(f"HEX({q})")
        elif c["repr"] == "bit_uint":
            exprs.append(f"{q}+0")
        elif c["repr"] == "geometry":
            exprs += [f"ST_AsText({q})", f"ST_SRID({q})", f"HEX({q})"]
        else:
            exprs.append(q)
    order = ", ".join(quote_ident(k) for k in pk) if pk else ", ".join(str(i + 1) for i in range(len(exprs)))
    raw = query(conn, f"SELECT {', '.join(exprs)} FROM {quote_ident(DATABASE)}.{quote_ident(table)} ORDER BY {order}")
    rows = []
    for r in raw:
        it = iter(r)
        row = {}
        for c in cols:
            if c["repr"] == "geometry":
                wkt, srid, hexv = next(it), next(it), next(it)
                row[c["name"]] = None if hexv is None else {"wkt": wkt, "srid": srid, "hex": hexv}
            else:
                row[c["name"]] = next(it)
        rows.append(row)
    if not pk:
        rows.sort(key=lambda r: json.dumps(r, sort_keys=True, ensure_ascii=False))
    return {"columns": cols, "primary_key": pk, "rows": rows}


def snapshot(conn):
    tables = [r[0] for r in query(conn, f"""
        SELECT TABLE_NAME FROM information_schema.TABLES
        WHERE TABLE_SCHEMA = '{DATABASE}' AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME""")]
    return {t: select_table(conn, t) for t in tables}


def compact(value):
    if isinstance(value, str) and len(value) > LONG_VALUE_CHARS:
        return {"sha256": hashlib.sha256(value.encode("utf-8")).hexdigest(), "chars": len(value)}
    return value


def compact_row(row):
    return {k: compact(v) for k, v in row.items()}


def diff_snapshots(before, after):
    changes = {}
    for table in sorted(set(before) | set(after)):
        b, a = before.get(table), after.get(table)
        if a is None:
            changes[table] = {"dropped": True}
            continue
        if b is None:
            changes[table] = {"created": True, "columns": a["columns"], "primary_key": a["primary_key"],
                              "inserted": [compact_row(r) for r in a["rows"]], "updated": [], "deleted": []}
            continue
        if b["columns"] != a["columns"] or b["primary_key"] != a["primary_key"]:
            changes[table] = {"schema_changed": True, "columns": a["columns"], "primary_key": a["primary_key"],
                              "rows_after": [compact_row(r) for r in a["rows"]]}
            continue
        inserted, deleted, updated = [], [], []
        if a["primary_key"]:
            key = lambda r: tuple(r[k] for k in a["primary_key"])  # noqa: E731
            bm = {key(r): r for r in b["rows"]}
            am = {key(r): r for r in a["rows"]}
            for k, r in bm.items():
                if k not in am:
                    deleted.append(compact_row(r))
                elif am[k] != r:
                    updated.append({"before": compact_row(r), "after": compact_row(am[k])})
            for k, r in am.items():
                if k not in bm:
                    inserted.append(compact_row(r))
        else:
            dump = lambda r: json.dumps(r, sort_keys=True, ensure_ascii=False)  # noqa: E731
            bc = collections.Counter(dump(r) for r in b["rows"])
            ac = collections.Counter(dump(r) for r in a["rows"])
            for r in b["rows"]:
                d = dump(r)
                if bc[d] > ac[d]:
                    deleted += [compact_row(r)] * (bc[d] - ac[d])
                    bc[d] = ac[d]
            for r in a["rows"]:
                d = dump(r)
                if ac[d] > bc[d]:
                    inserted += [compact_row(r)] * (ac[d] - bc[d])
                    ac[d] = bc[d]
        if inserted or deleted or updated:
            changes[table] = {"inserted": inserted, "updated": updated, "deleted": deleted}
    return changes


def gtid_pos(conn):
    return query(conn, "SELECT @@GLOBAL.gtid_binlog_pos")[0][0]


def gtid_seq(pos):
    # One domain (0) and one server id (1) here: "0-1-N".
    return int(pos.rsplit("-", 1)[1]) if pos else 0


# ---------------------------------------------------------------------------------------------- binlog census

def event_census(path):
    """Counts event type codes by walking the 19-byte v4 headers. Returns (counts, first_error)."""
    counts = collections.Counter()
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:4] != b"\xfebin":
        return counts, "no binlog magic"
    off = 4
    while off < len(data):
        if off + 19 > len(data):
            return counts, f"truncated header at {off}"
        _ts, typ, _sid, size, _next, _flags = struct.unpack_from("<IBIIIH", data, off)
        if size < 19 or off + size > len(data):
            return counts, f"bad event size {size} at {off}"
        counts[typ] += 1
        off += size
    return counts, None


def compare_final(port, path):
    with open(path, encoding="utf-8") as fh:
        expected = json.load(fh)["tables"]
    conn = connect(port)
    query(conn, "SET SESSION time_zone = '+00:00'")
    actual = snapshot(conn)
    conn.close()
    problems = 0
    for table in sorted(set(expected) | set(actual)):
        e, a = expected.get(table), actual.get(table)
        if e is None or a is None:
            print(f"{table}: only in {'the server' if e is None else path}")
            problems += 1
        elif e != a:
            problems += 1
            if e["columns"] != a["columns"]:
                print(f"{table}: columns differ")
            for i, (er, ar) in enumerate(zip(e["rows"], a["rows"])):
                for col in er:
                    if er.get(col) != ar.get(col):
                        print(f"{table} row {i} column {col}: expected {str(er.get(col))[:80]!r}, got {str(ar.get(col))[:80]!r}")
            if len(e["rows"]) != len(a["rows"]):
                print(f"{table}: expected {len(e['rows'])} rows, got {len(a['rows'])}")
    print(f"compare-final: {len(expected)} tables, {sum(len(t['rows']) for t in expected.values())} rows, "
          f"{problems} tables differ")
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--sql")
    ap.add_argument("--datadir", help="the server's datadir (binlogs are copied from it)")
    ap.add_argument("--out")
    ap.add_argument("--compare-final", metavar="FILE",
                    help="run no SQL: compare the server's tables with FILE (an expected-final.json); exit 1 on a difference")
    args = ap.parse_args()
    if args.compare_final:
        sys.exit(compare_final(args.port, args.compare_final))
    if not (args.sql and args.datadir and args.out):
        ap.error("--sql, --datadir and --out are required when recording")

    os.makedirs(args.out, exist_ok=True)
    snap = connect(args.port)
    query(snap, "SET SESSION time_zone = '+00:00'")
    conn = connect(args.port)

    prev = {}
    prev_seq = gtid_seq(gtid_pos(snap))
    pending = []
    transactions = []
    for kind, stmt in split_statements(args.sql):
        if kind == "reconnect":
            conn.close()
            conn = connect(args.port)
            continue
        with conn.cursor() as cur:
            cur.execute(stmt)
            cur.fetchall()
        pending.append(stmt)
        pos = gtid_pos(conn)
        seq = gtid_seq(pos)
        if seq == prev_seq:
            continue
        row_image = query(conn, "SELECT @@SESSION.binlog_row_image")[0][0]
        compressed = query(conn, "SELECT @@GLOBAL.log_bin_compress")[0][0]
        cur_snap = snapshot(snap)
        domain_server = pos.rsplit("-", 1)[0]
        transactions.append({
            "gtid": pos,
            "gtids": [f"{domain_server}-{n}" for n in range(prev_seq + 1, seq + 1)],
            "statements": [s for s in pending if not s.upper().startswith(("SET TIMESTAMP", "SET SESSION TIME_ZONE"))],
            "binlog_row_image": row_image,
            "log_bin_compress": compressed in ("1", "ON"),
            "changes": diff_snapshots(prev, cur_snap),
        })
        if seq - prev_seq != 1:
            print(f"note: statement advanced GTID by {seq - prev_seq}: {stmt[:60]!r}", file=sys.stderr)
        prev, prev_seq, pending = cur_snap, seq, []
    conn.close()

    final = snapshot(snap)
    version = query(snap, "SELECT VERSION()")[0][0]
    final_pos = gtid_pos(snap)
    logs = query(snap, "SHOW BINARY LOGS")
    snap.close()

    # Copy every closed binlog file (the workload ends with FLUSH BINARY LOGS: the last one is the new,
    # empty active file and is left out).
    files = []
    for name, _size, *_ in logs[:-1]:
        src = os.path.join(args.datadir, name)
        dst = os.path.join(args.out, name)
        shutil.copyfile(src, dst)
        with open(dst, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
        counts, err = event_census(dst)
        if err:
            raise SystemExit(f"{dst}: {err}")
        files.append({"file": name, "bytes": os.path.getsize(dst), "sha256": digest,
                      "event_types": {str(k): counts[k] for k in sorted(counts)}})

    common = {"server_version": version, "database": DATABASE, "time_zone": "+00:00",
              "generated_by": "integration/record_workload.sh"}
    with open(os.path.join(args.out, "expected-final.json"), "w", encoding="utf-8") as fh:
        json.dump({"format": "sluice-expected-final/1", **common, "gtid_binlog_pos": final_pos,
                   "binlog_files": [f["file"] for f in files], "tables": final},
                  fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    with open(os.path.join(args.out, "expected-transactions.json"), "w", encoding="utf-8") as fh:
        json.dump({"format": "sluice-expected-transactions/1", **common, "long_value_chars": LONG_VALUE_CHARS,
                   "transactions": transactions}, fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    with open(os.path.join(args.out, "manifest.json"), "w", encoding="utf-8") as fh:
        json.dump({"format": "sluice-recording-manifest/1", **common, "gtid_binlog_pos": final_pos,
                   "transactions": len(transactions), "files": files}, fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    total = collections.Counter()
    for f in files:
        total.update({int(k): v for k, v in f["event_types"].items()})
    print(f"recorded {len(transactions)} transactions up to GTID {final_pos} in "
          f"{', '.join(f['file'] for f in files)}; event types {dict(sorted(total.items()))}")


if __name__ == "__main__":
    main()
