//! pprof: gzipped `profile.proto`, as Go's `net/http/pprof` serves it, so
//! `go tool pprof`, Parca and Pyroscope can read emberd's profiles.
//!
//! The messages are declared here with prost's derive (no protoc at build
//! time), field numbers as in perftools' `profile.proto`.

use crate::shared::FastMap;
use std::io::Write;

use prost::Message;

use crate::query::Query;
use crate::query::profile::Grouping;
use crate::shared::{Frame, FrameKind};
use crate::store::{QueryResult, StackId};

#[allow(missing_docs)]
pub mod proto {
    //! perftools.profiles messages.

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// Builds a pprof profile. Index 0 of every table means "none", so ids start at 1.
struct Builder {
    p: proto::Profile,
    // ahash: SipHash of frames (name, file, module) was a quarter of an
    // uncached profile's time.
    strings: FastMap<String, i64>,
    functions: FastMap<(String, Option<String>), u64>,
    locations: FastMap<Frame, u64>,
    mappings: FastMap<(String, Option<String>), u64>,
}

impl Builder {
    fn new() -> Self {
        let mut b = Self {
            p: proto::Profile::default(),
            strings: FastMap::default(),
            functions: FastMap::default(),
            locations: FastMap::default(),
            mappings: FastMap::default(),
        };
        b.s("");
        b
    }

    fn s(&mut self, v: &str) -> i64 {
        if let Some(&i) = self.strings.get(v) {
            return i;
        }
        let i = self.p.string_table.len() as i64;
        self.p.string_table.push(v.to_owned());
        self.strings.insert(v.to_owned(), i);
        i
    }

    fn mapping(&mut self, path: &str, build_id: Option<&str>) -> u64 {
        let key = (path.to_owned(), build_id.map(str::to_owned));
        if let Some(&id) = self.mappings.get(&key) {
            return id;
        }
        let id = self.p.mapping.len() as u64 + 1;
        let filename = self.s(path);
        let build_id = build_id.map_or(0, |b| self.s(b));
        self.p.mapping.push(proto::Mapping {
            id,
            filename,
            build_id,
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
            ..Default::default()
        });
        self.mappings.insert(key, id);
        id
    }

    fn location(&mut self, f: &Frame) -> u64 {
        if let Some(&id) = self.locations.get(f) {
            return id;
        }
        let fkey = (f.to_string(), f.file.as_deref().map(str::to_owned));
        let function_id = match self.functions.get(&fkey) {
            Some(&id) => id,
            None => {
                let id = self.p.function.len() as u64 + 1;
                let name = self.s(&fkey.0);
                let filename = f.file.as_deref().map_or(0, |x| self.s(x));
                self.p.function.push(proto::Function {
                    id,
                    name,
                    system_name: name,
                    filename,
                    start_line: 0,
                });
                self.functions.insert(fkey, id);
                id
            }
        };
        let mapping_id = match (&f.module, f.kind) {
            (Some(m), _) => self.mapping(&m.path, m.build_id.as_deref()),
            (None, FrameKind::Kernel) => self.mapping("[kernel.kallsyms]", None),
            (
                None,
                FrameKind::Jit | FrameKind::Java | FrameKind::JavaInlined | FrameKind::JavaScript,
            ) => self.mapping("[jit]", None),
            _ => 0,
        };
        let id = self.p.location.len() as u64 + 1;
        self.p.location.push(proto::Location {
            id,
            mapping_id,
            address: 0,
            line: vec![proto::Line {
                function_id,
                line: f.line.map_or(0, i64::from),
                column: 0,
            }],
            is_folded: false,
        });
        self.locations.insert(f.clone(), id);
        id
    }
}

/// Builds the pprof profile of a CPU query: values `samples/count` and
/// `cpu/nanoseconds` (samples x period), labels `pid`, `comm` and, when
/// grouped by thread, `tid`. Frame regexes apply as in folded output.
pub fn cpu_profile(query: &Query, result: &QueryResult, frequency_hz: u64) -> proto::Profile {
    let mut b = Builder::new();
    let period = 1_000_000_000 / frequency_hz.max(1) as i64;
    let samples = b.s("samples");
    let count = b.s("count");
    let cpu = b.s("cpu");
    let nanos = b.s("nanoseconds");
    b.p.sample_type = vec![
        proto::ValueType {
            r#type: samples,
            unit: count,
        },
        proto::ValueType {
            r#type: cpu,
            unit: nanos,
        },
    ];
    b.p.period_type = Some(proto::ValueType {
        r#type: cpu,
        unit: nanos,
    });
    b.p.period = period;
    // Time is what CPU profiles are read in (as Go's own CPU profiles).
    b.p.default_sample_type = cpu;
    fill_samples(&mut b, query, result, |v| vec![v as i64, v as i64 * period]);
    b.p
}

/// Builds the pprof profile of a stored event: one sample type (`ty`/`unit`,
/// e.g. `offcpu`/`nanoseconds`), labels as for CPU.
pub fn event_profile(query: &Query, result: &QueryResult, ty: &str, unit: &str) -> proto::Profile {
    let mut b = Builder::new();
    let (t, u) = (b.s(ty), b.s(unit));
    b.p.sample_type = vec![proto::ValueType { r#type: t, unit: u }];
    b.p.period_type = Some(proto::ValueType { r#type: t, unit: u });
    b.p.period = 1;
    fill_samples(&mut b, query, result, |v| vec![v as i64]);
    b.p
}

/// Go's heap profile (`/debug/pprof/heap`): sample types `alloc_objects`,
/// `alloc_space`, `inuse_objects`, `inuse_space`, from one result each (in
/// that order). The results come from different stores, so each row
/// becomes its own sample with one value set; pprof sums samples that
/// share a stack. `period` is the mean bytes between samples, as Go's
/// `MemProfileRate`.
pub fn heap_profile(query: &Query, results: [&QueryResult; 4], period: u64) -> proto::Profile {
    let mut b = Builder::new();
    let types = [
        ("alloc_objects", "count"),
        ("alloc_space", "bytes"),
        ("inuse_objects", "count"),
        ("inuse_space", "bytes"),
    ];
    b.p.sample_type = types
        .iter()
        .map(|(t, u)| proto::ValueType {
            r#type: b.s(t),
            unit: b.s(u),
        })
        .collect();
    b.p.period_type = Some(proto::ValueType {
        r#type: b.s("space"),
        unit: b.s("bytes"),
    });
    b.p.period = period as i64;
    for (i, result) in results.into_iter().enumerate() {
        fill_samples(&mut b, query, result, |v| {
            let mut values = vec![0; 4];
            values[i] = v as i64;
            values
        });
    }
    b.p
}

/// The pprof label of a sample's service (Pyroscope splits a pushed profile
/// into series by it).
pub const SERVICE_LABEL: &str = "service_name";
/// The pprof label of a sample's systemd unit.
pub const UNIT_LABEL: &str = "unit";
/// The pprof label of a sample's container id.
pub const CONTAINER_LABEL: &str = "container_id";

/// Adds one sample per row, with `values` of the row's value.
fn fill_samples(
    b: &mut Builder,
    query: &Query,
    result: &QueryResult,
    values: impl Fn(u64) -> Vec<i64>,
) {
    let (from, to) = (query.selection.from, query.selection.to);
    b.p.time_nanos = from as i64 * 1_000_000_000;
    b.p.duration_nanos = (to - from) as i64 * 1_000_000_000;
    let (k_pid, k_tid, k_comm) = (b.s("pid"), b.s("tid"), b.s("comm"));
    let (k_service, k_unit, k_container) =
        (b.s(SERVICE_LABEL), b.s(UNIT_LABEL), b.s(CONTAINER_LABEL));
    let folded = query.include.is_some() || query.exclude.is_some();
    let mut locs_of: FastMap<StackId, Vec<u64>> = FastMap::default();
    for row in &result.rows {
        if folded {
            let names: Vec<String> = result.frames(row.stack).map(|f| f.to_string()).collect();
            let root = query.group.root_frame(
                &row.process_comm,
                &row.thread_comm,
                row.pid,
                row.tid,
                &row.workload,
            );
            let line = root.into_iter().chain(names).collect::<Vec<_>>().join(";");
            if query.include.as_ref().is_some_and(|re| !re.is_match(&line))
                || query.exclude.as_ref().is_some_and(|re| re.is_match(&line))
            {
                continue;
            }
        }
        let locs = match locs_of.get(&row.stack) {
            Some(l) => l.clone(),
            None => {
                let frames: Vec<Frame> = result.frames(row.stack).cloned().collect();
                // pprof lists locations leaf first.
                let l: Vec<u64> = frames.iter().rev().map(|f| b.location(f)).collect();
                locs_of.insert(row.stack, l.clone());
                l
            }
        };
        let comm = if query.group == Grouping::Thread {
            &row.thread_comm
        } else {
            &row.process_comm
        };
        // Samples of exited processes in merged history have no pid.
        let exited = row.pid == crate::shared::Pid::EXITED;
        let mut label = Vec::with_capacity(3);
        if !exited {
            label.push(proto::Label {
                key: k_pid,
                num: i64::from(row.pid.0),
                ..Default::default()
            });
        }
        label.push(proto::Label {
            key: k_comm,
            str: b.s(comm),
            ..Default::default()
        });
        if query.group == Grouping::Thread && !exited {
            label.push(proto::Label {
                key: k_tid,
                num: i64::from(row.tid.0),
                ..Default::default()
            });
        }
        let w = &row.workload;
        label.push(proto::Label {
            key: k_service,
            str: b.s(&crate::shared::Workload::service(
                &w.unit,
                &w.container,
                &row.process_comm,
            )),
            ..Default::default()
        });
        for (key, value) in [(k_unit, &w.unit), (k_container, &w.container)] {
            if !value.is_empty() {
                label.push(proto::Label {
                    key,
                    str: b.s(value),
                    ..Default::default()
                });
            }
        }
        b.p.sample.push(proto::Sample {
            location_id: locs,
            value: values(row.value),
            label,
        });
    }
}

/// Encodes and gzips a profile, as pprof files are.
pub fn encode_gzip(p: &proto::Profile) -> Vec<u8> {
    gzip(&p.encode_to_vec())
}

/// `raw` gzipped, at the fast level (profiles are re-sent, not archived).
pub fn gzip(raw: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(
        Vec::with_capacity(raw.len() / 2),
        flate2::Compression::fast(),
    );
    gz.write_all(raw).expect("writing to a Vec cannot fail");
    gz.finish().expect("writing to a Vec cannot fail")
}
