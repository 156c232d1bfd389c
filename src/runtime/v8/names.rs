//! A JavaScript function's name and script, from its SharedFunctionInfo,
//! as V8's own profiler names it (`SharedFunctionInfo::DebugName`): the
//! function's name, else the name V8 inferred for it (`obj.method = function
//! () {}`), else `(anonymous)`; the script's name as node gave it (a path
//! for CommonJS, a `file://` URL for ES modules, `node:internal/...` for
//! node's own code).

use super::heap::{Heap, is_object, is_smi, smi};

/// What names a SharedFunctionInfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionInfo {
    /// Its name (`(anonymous)` when it has none).
    pub name: String,
    /// Its script's name, if it has one.
    pub script: Option<String>,
}

/// ScopeInfo slots searched for the function's name past the context
/// locals (its name, then the inferred name, come within a few slots).
const NAME_SLOTS: u64 = 16;
/// Context locals V8 keeps inline in a ScopeInfo; more are in a hash table
/// (`kScopeInfoMaxInlinedLocalNamesSize`).
const INLINED_LOCALS: i64 = 75;
/// Context locals believed at most (a larger count is no ScopeInfo).
const MAX_LOCALS: i64 = 1 << 16;

/// The name and script of the SharedFunctionInfo at `shared` (tagged),
/// whose `name_or_scope_info` and script fields hold `name_or_scope` and
/// `script`.
pub fn function_info(heap: &mut Heap<'_>, name_or_scope: u64, script: u64) -> FunctionInfo {
    let name = function_name(heap, name_or_scope)
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "(anonymous)".to_owned());
    FunctionInfo {
        name,
        script: script_name(heap, script),
    }
}

/// The name a SharedFunctionInfo's `name_or_scope_info` gives: the
/// string itself, or the first non-empty string among the ScopeInfo's
/// slots past its context locals, before any other object (the function's
/// name, else its inferred name; the ScopeInfo's layout is not in the
/// metadata, so the slots are searched, as the OpenTelemetry profiler
/// does).
fn function_name(heap: &mut Heap<'_>, v: u64) -> Option<String> {
    if is_smi(v) || !is_object(v) {
        return None; // no name (kNoSharedNameSentinel)
    }
    let t = heap.instance_type(v).ok()?;
    if t < heap.layout.first_nonstring {
        return heap.string(v);
    }
    if t != heap.layout.type_scope_info {
        return None;
    }
    // The function's name (with its variable's slot, a SMI) and its
    // inferred name (a string, or undefined) come before any other object
    // of the ScopeInfo (its outer scope's ScopeInfo, the debugger's block
    // list, module data): the search stops at the first object that is no
    // string, so a string of those is never taken for the name.
    for w in scope_tail(heap, v)? {
        if is_smi(w) {
            continue;
        }
        if !heap.is_string(w) {
            return None;
        }
        if let Some(s) = heap.string(w).filter(|s| !s.is_empty()) {
            return Some(s);
        }
    }
    None
}

/// The words of ScopeInfo `v` (tagged) past its context locals, where
/// its optional parts begin, [`NAME_SLOTS`] of them (fewer where the
/// memory ends).
fn scope_tail(heap: &mut Heap<'_>, v: u64) -> Option<Vec<u64>> {
    let slot = |i: u64| 8 + 8 * i;
    let locals = heap
        .mem
        .u64(v - 1 + slot(u64::from(heap.layout.scope_context_locals)))
        .ok()?;
    if !is_smi(locals) {
        return None;
    }
    let n = smi(locals);
    if !(0..MAX_LOCALS).contains(&n) {
        return None;
    }
    let names = if n < INLINED_LOCALS { n } else { 1 };
    let from = u64::from(heap.layout.scope_first_vars) + (names + n) as u64;
    Some(
        (from..from + NAME_SLOTS)
            .map_while(|i| heap.mem.u64(v - 1 + slot(i)).ok())
            .collect(),
    )
}

/// Where the function of a SharedFunctionInfo whose `name_or_scope_info`
/// holds `v` starts in its script (V8's `StartPosition`), when `v` is a
/// ScopeInfo: its position info, two SMIs (start, end), follows the
/// function's name and inferred name (strings, undefined, SMIs) and
/// precedes any other object of the ScopeInfo, or the next object's map.
/// So it is the last two of the SMIs met before the first object that is
/// neither a string nor an oddball. From V8 13 on it has a fixed place.
pub fn start_position(heap: &mut Heap<'_>, v: u64, type_oddball: u16) -> Option<u32> {
    if !is_object(v) || heap.instance_type(v).ok()? != heap.layout.type_scope_info {
        return None;
    }
    let valid =
        |start: i64, end: i64| (0 <= start && start < end && end < 1 << 31).then_some(start as u32);
    // V8 13 on (Node 24 on): the position info is the two fixed slots
    // before the variable part (`scopeinfo_idx_first_vars` 5, was 3).
    let first = u64::from(heap.layout.scope_first_vars);
    if first >= 5 {
        let word = |heap: &mut Heap<'_>, i: u64| {
            heap.mem.u64(v - 1 + 8 + 8 * i).ok().filter(|&w| is_smi(w))
        };
        let start = word(heap, first - 2)?;
        let end = word(heap, first - 1)?;
        return valid(smi(start), smi(end));
    }
    let mut run: Vec<i64> = Vec::new();
    for w in scope_tail(heap, v)? {
        if is_smi(w) {
            run.push(smi(w));
            continue;
        }
        let t = heap.instance_type(w).ok()?;
        if t < heap.layout.first_nonstring || t == type_oddball {
            run.clear();
            continue;
        }
        let [.., start, end] = run[..] else {
            return None;
        };
        return valid(start, end);
    }
    None
}

/// The name of the script `v` (a Script, or debug info when a debugger
/// is attached: no name then).
fn script_name(heap: &mut Heap<'_>, v: u64) -> Option<String> {
    if !is_object(v) || heap.instance_type(v).ok()? != heap.layout.type_script {
        return None;
    }
    let name = heap.field(v, heap.layout.script_name).ok()?;
    heap.string(name).filter(|s| !s.is_empty())
}

/// The short name of a script for frame text: its file name (`app.js`
/// of `/srv/app.js` or `file:///srv/app.mjs`); node's own scripts keep
/// their whole name (`node:internal/timers`).
pub fn short_script(script: &str) -> &str {
    if script.starts_with("node:") {
        return script;
    }
    let path = script.strip_prefix("file://").unwrap_or(script);
    path.rsplit('/')
        .next()
        .filter(|s| !s.is_empty())
        .unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_shown_by_file_name_and_node_internals_whole() {
        assert_eq!(short_script("/srv/app/main.js"), "main.js");
        assert_eq!(short_script("file:///srv/app/mod.mjs"), "mod.mjs");
        assert_eq!(short_script("node:internal/timers"), "node:internal/timers");
        assert_eq!(
            short_script("evalmachine.<anonymous>"),
            "evalmachine.<anonymous>"
        );
    }
}
