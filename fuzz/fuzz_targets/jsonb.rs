//! MySQL binary JSON and partial-update diffs: parse, print, apply.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_binlog::jsonb;

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |&b| usize::from(b)).min(data.len().saturating_sub(1));
    let (doc, diffs) = data.get(1..).unwrap_or(&[]).split_at(split.min(data.len().saturating_sub(1)));
    if let Ok(mut v) = jsonb::parse(doc) {
        let _ = v.to_string();
        if let Ok(d) = jsonb::read_json_diffs(diffs) {
            let _ = jsonb::apply_diffs(&mut v, &d);
            let _ = v.to_string();
        }
    }
});
