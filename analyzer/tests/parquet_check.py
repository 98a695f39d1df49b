"""Independent reader of `export parquet` files: DuckDB (PyPI `duckdb`),
with extension download and autoloading switched off (its Parquet reader is
built in). Prints one JSON object computed in SQL over the file or glob in
argv[1]: rows per kind, records per opcode name, drop totals, and the
latency percentiles of each opcode's declared latency (`op_latency_ns`),
overall and per source, at the ranks HdrHistogram uses (ceil(q * n)), so
`stats --json` can be compared with them.
"""
import json
import sys

import duckdb

QUANTILES = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)]


def percentiles(con, path, by):
    # stats clamps latencies to [1, 2^40] before its histograms.
    picks = ", ".join(
        "max(x) FILTER (WHERE i = greatest(1, ceil(%r::DOUBLE * n))) AS %s" % (q, k) for k, q in QUANTILES
    )
    sql = f"""
        WITH v AS (
            SELECT {by}, least(greatest(op_latency_ns, 1), 1099511627776) AS x
            FROM read_parquet($path)
            WHERE kind = 'record' AND op_latency_ns IS NOT NULL),
        r AS (
            SELECT {by}, x,
                   row_number() OVER (PARTITION BY {by} ORDER BY x) AS i,
                   count(*) OVER (PARTITION BY {by}) AS n
            FROM v)
        SELECT {by}, any_value(n) AS count, max(x) AS max, {picks}
        FROM r GROUP BY {by} ORDER BY {by}"""
    cur = con.execute(sql, {"path": path})
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, [v if isinstance(v, (str, type(None))) else int(v) for v in row])) for row in cur.fetchall()]


def main(path):
    con = duckdb.connect(config={
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    })
    q = lambda sql: con.execute(sql, {"path": path}).fetchall()
    out = {
        "rows": q("SELECT count(*) FROM read_parquet($path)")[0][0],
        "kinds": {k: n for k, n in q("SELECT kind, count(*) FROM read_parquet($path) GROUP BY kind")},
        "records_by_name": {
            k: n for k, n in q("SELECT name, count(*) FROM read_parquet($path) WHERE kind = 'record' GROUP BY name")
        },
        "lost_marked": int(q("SELECT coalesce(sum(count), 0) FROM read_parquet($path) WHERE kind = 'lost'")[0][0]),
        "lost_unmarked": int(q("SELECT coalesce(sum(count), 0) FROM read_parquet($path) WHERE kind = 'gap'")[0][0]),
        "latency": percentiles(con, path, "name"),
        "latency_by_source": percentiles(con, path, "name, source"),
        "extensions_loaded": [
            r[0]
            for r in con.execute(
                "SELECT extension_name FROM duckdb_extensions()"
                " WHERE loaded AND coalesce(install_mode, '') <> 'STATICALLY_LINKED'"
            ).fetchall()
        ],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
