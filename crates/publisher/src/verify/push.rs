//! **The metrics of a verify run**, for a job that ends before any scrape could reach it (a
//! CronJob): pushed to a Prometheus Pushgateway, one group per table and target, or written to
//! a file in the text format (node_exporter's textfile collector).
//!
//! - `sluice_verify_rows_total{outcome}`: the run's keys by outcome (`equal`, `missing`,
//!   `extra`, `different`, `unsettled`);
//! - `sluice_verify_equal`: 1 when the table equals the target, 0 when not or not verified;
//! - `sluice_verify_last_run_timestamp_seconds`, `sluice_verify_duration_seconds`;
//! - `sluice_verify_last_success_timestamp_seconds`: pushed only by an equal run, so that it
//!   keeps the last one (a Pushgateway POST replaces only the metrics it sends).
//!
//! Each series carries `source`, `table` and `target` (in a push, as the group's labels).

use std::fmt::Write as _;

use base64::Engine as _;

use super::TableReport;

/// The metrics of the runs' comparisons (`source`: the configuration's source name), as one
/// text exposition; `labelled`: each series with its `source`, `table` and `target` labels
/// (false: a push, where the group's path carries them).
pub(crate) fn exposition(source: &str, reports: &[&TableReport], now_s: f64, labelled: bool) -> String {
    let labels = |r: &TableReport, extra: &str| {
        let mut l = Vec::new();
        if labelled {
            l.push(format!("source=\"{}\"", escape(source)));
            l.push(format!("table=\"{}\"", escape(&r.table)));
            l.push(format!("target=\"{}\"", escape(&r.target)));
        }
        if !extra.is_empty() {
            l.push(extra.to_string());
        }
        if l.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", l.join(","))
        }
    };
    let judged: Vec<&&TableReport> = reports.iter().filter(|r| r.skipped.is_none()).collect();
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, lines: Vec<String>| {
        if lines.is_empty() {
            return;
        }
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for l in lines {
            let _ = writeln!(out, "{name}{l}");
        }
    };
    metric(
        "sluice_verify_rows_total",
        "counter",
        "Keys compared by the last sluice verify run, by outcome.",
        judged
            .iter()
            .filter(|r| r.error.is_none())
            .flat_map(|r| {
                [
                    ("equal", r.equal),
                    ("missing", r.missing),
                    ("extra", r.extra),
                    ("different", r.different),
                    ("unsettled", r.unsettled),
                ]
                .map(|(o, n)| format!("{} {n}", labels(r, &format!("outcome=\"{o}\""))))
            })
            .collect(),
    );
    metric(
        "sluice_verify_equal",
        "gauge",
        "1 when the last sluice verify run found the table equal to the target, 0 when not or not verified.",
        judged.iter().map(|r| format!("{} {}", labels(r, ""), u8::from(r.is_equal()))).collect(),
    );
    metric(
        "sluice_verify_last_run_timestamp_seconds",
        "gauge",
        "When the last sluice verify run of the table ended.",
        judged.iter().map(|r| format!("{} {now_s:.3}", labels(r, ""))).collect(),
    );
    metric(
        "sluice_verify_duration_seconds",
        "gauge",
        "How long the last sluice verify run of the table took.",
        judged.iter().map(|r| format!("{} {:.3}", labels(r, ""), r.seconds)).collect(),
    );
    metric(
        "sluice_verify_last_success_timestamp_seconds",
        "gauge",
        "When a sluice verify run last found the table equal to the target.",
        judged.iter().filter(|r| r.is_equal()).map(|r| format!("{} {now_s:.3}", labels(r, ""))).collect(),
    );
    out
}

/// A label value escaped for the text format.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The Pushgateway path of a comparison's group: each label value base64url-encoded (a table
/// name may hold any character).
pub(crate) fn group_path(source: &str, r: &TableReport) -> String {
    let b64 = |v: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    // an empty value cannot be base64 in a path: `=` is the Pushgateway's spelling of it
    let enc = |v: &str| if v.is_empty() { "=".to_string() } else { b64(v) };
    format!(
        "/metrics/job/sluice_verify/source@base64/{}/table@base64/{}/target@base64/{}",
        enc(source),
        enc(&r.table),
        enc(&r.target)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(table: &str, different: u64) -> TableReport {
        TableReport {
            table: table.into(),
            target: "kafka".into(),
            against: "t".into(),
            rows: 10,
            equal: 10 - different,
            different,
            seconds: 1.5,
            ..TableReport::default()
        }
    }

    #[test]
    fn an_unequal_table_pushes_no_success_time() {
        let (ok, bad) = (report("shop.a", 0), report("shop.\"b\"", 2));
        let text = exposition("src", &[&ok, &bad], 1000.0, true);
        assert!(text.contains(
            "sluice_verify_rows_total{source=\"src\",table=\"shop.\\\"b\\\"\",target=\"kafka\",outcome=\"different\"} 2"
        ));
        assert!(text.contains("sluice_verify_equal{source=\"src\",table=\"shop.a\",target=\"kafka\"} 1"));
        assert!(text.contains("sluice_verify_equal{source=\"src\",table=\"shop.\\\"b\\\"\",target=\"kafka\"} 0"));
        let success: Vec<&str> =
            text.lines().filter(|l| l.starts_with("sluice_verify_last_success_timestamp_seconds{")).collect();
        assert_eq!(
            success,
            ["sluice_verify_last_success_timestamp_seconds{source=\"src\",table=\"shop.a\",target=\"kafka\"} 1000.000"]
        );
        let pushed = exposition("src", &[&bad], 1000.0, false);
        assert!(pushed.contains("sluice_verify_equal 0\n"), "{pushed}");
        assert!(!pushed.contains("last_success"), "{pushed}");
        assert_eq!(
            group_path("src", &bad),
            "/metrics/job/sluice_verify/source@base64/c3Jj/table@base64/c2hvcC4iYiI/target@base64/a2Fma2E"
        );
    }
}
