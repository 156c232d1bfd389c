//! OpenTelemetry's profiles signal (OTLP/HTTP, protobuf): one export
//! request per interval, a resource per service and container, a profile
//! per event, the messages as the `opentelemetry-proto` crate (0.33, proto
//! v1.10.0, `v1development`) generates them. Attributes are named as the
//! OpenTelemetry eBPF profiler names them.

use std::collections::HashMap;

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::profiles::v1development as otel;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use crate::shared::{Frame, FrameKind, Workload};
use crate::store::QueryResult;

/// One event's rows over the interval, and how to read their values.
pub struct EventRows<'a> {
    /// Sample type and unit (`samples`/`count`, `off_cpu`/`nanoseconds`).
    pub sample_type: (&'static str, &'static str),
    /// Period type and unit, and the period (CPU: `cpu`/`nanoseconds`, 1e9/Hz).
    pub period: Option<((&'static str, &'static str), i64)>,
    /// The rows.
    pub result: &'a QueryResult,
}

/// Tables shared by every profile of a request (the dictionary). Index 0 of
/// each is its zero value, as the proto asks.
#[derive(Default)]
struct Dictionary {
    d: otel::ProfilesDictionary,
    strings: HashMap<String, i32>,
    functions: HashMap<(i32, i32), i32>,
    mappings: HashMap<i32, i32>,
    locations: HashMap<Frame, i32>,
    stacks: HashMap<Vec<i32>, i32>,
    attributes: HashMap<(i32, String), i32>,
}

impl Dictionary {
    fn new() -> Self {
        let mut d = Dictionary::default();
        d.s("");
        d.d.mapping_table.push(otel::Mapping::default());
        d.d.location_table.push(otel::Location::default());
        d.d.function_table.push(otel::Function::default());
        d.d.link_table.push(otel::Link::default());
        d.d.attribute_table.push(otel::KeyValueAndUnit::default());
        d.d.stack_table.push(otel::Stack::default());
        d
    }

    fn s(&mut self, v: &str) -> i32 {
        if let Some(&i) = self.strings.get(v) {
            return i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(v.to_owned());
        self.strings.insert(v.to_owned(), i);
        i
    }

    /// A string attribute, or an integer one when `int` is given.
    fn attr(&mut self, key: &str, value: &str, int: Option<i64>) -> i32 {
        let k = self.s(key);
        let id = (k, value.to_owned());
        if let Some(&i) = self.attributes.get(&id) {
            return i;
        }
        let i = self.d.attribute_table.len() as i32;
        self.d.attribute_table.push(otel::KeyValueAndUnit {
            key_strindex: k,
            value: Some(AnyValue {
                value: Some(match int {
                    Some(n) => any_value::Value::IntValue(n),
                    None => any_value::Value::StringValue(value.to_owned()),
                }),
            }),
            unit_strindex: 0,
        });
        self.attributes.insert(id, i);
        i
    }

    fn mapping(&mut self, path: &str) -> i32 {
        let name = self.s(path);
        if let Some(&i) = self.mappings.get(&name) {
            return i;
        }
        let i = self.d.mapping_table.len() as i32;
        self.d.mapping_table.push(otel::Mapping {
            filename_strindex: name,
            ..Default::default()
        });
        self.mappings.insert(name, i);
        i
    }

    fn location(&mut self, f: &Frame) -> i32 {
        if let Some(&i) = self.locations.get(f) {
            return i;
        }
        // Named as in folded text and pprof (`schedule_[k]`), so the three
        // agree on every frame.
        let name = self.s(&f.to_string());
        let file = f.file.as_deref().map_or(0, |x| self.s(x));
        let function = *self.functions.entry((name, file)).or_insert_with(|| {
            let i = self.d.function_table.len() as i32;
            self.d.function_table.push(otel::Function {
                name_strindex: name,
                system_name_strindex: name,
                filename_strindex: file,
                start_line: 0,
            });
            i
        });
        let mapping = match (&f.module, f.kind) {
            (Some(m), _) => self.mapping(&m.path),
            (None, FrameKind::Kernel) => self.mapping("[kernel.kallsyms]"),
            (
                None,
                FrameKind::Jit | FrameKind::Java | FrameKind::JavaInlined | FrameKind::JavaScript,
            ) => self.mapping("[jit]"),
            _ => 0,
        };
        let kind = match f.kind {
            FrameKind::Kernel => "kernel",
            FrameKind::Python => "cpython",
            FrameKind::Jit => "jit",
            // The OpenTelemetry profiler's word for HotSpot's frames,
            // interpreted, compiled or inlined alike.
            FrameKind::Java | FrameKind::JavaInlined => "jvm",
            // The OpenTelemetry profiler's word for V8's frames.
            FrameKind::JavaScript => "v8js",
            _ => "native",
        };
        let kind = self.attr("profile.frame.type", kind, None);
        let i = self.d.location_table.len() as i32;
        self.d.location_table.push(otel::Location {
            mapping_index: mapping,
            address: 0,
            lines: vec![otel::Line {
                function_index: function,
                line: f.line.map_or(0, i64::from),
                column: 0,
            }],
            attribute_indices: vec![kind],
        });
        self.locations.insert(f.clone(), i);
        i
    }

    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        if let Some(&i) = self.stacks.get(&locations) {
            return i;
        }
        let i = self.d.stack_table.len() as i32;
        self.d.stack_table.push(otel::Stack {
            location_indices: locations.clone(),
        });
        self.stacks.insert(locations, i);
        i
    }

    fn value_type(&mut self, (ty, unit): (&str, &str)) -> otel::ValueType {
        otel::ValueType {
            type_strindex: self.s(ty),
            unit_strindex: self.s(unit),
        }
    }
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..Default::default()
    }
}

/// The export request of one interval `[from, to)` (unix seconds): a
/// resource per service (`service.name`, `container.id`, `host.name`), a
/// profile per event in each, samples with `process.pid`,
/// `process.executable.name`, `process.executable.path`, `thread.name`.
pub fn request(host: &str, from: u64, to: u64, events: &[EventRows<'_>]) -> Vec<u8> {
    let mut dict = Dictionary::new();
    // Resource key (service, container) -> profile per event.
    let mut resources: Vec<((String, String), Vec<otel::Profile>)> = Vec::new();
    let mut index: HashMap<(String, String), usize> = HashMap::new();
    for (e, ev) in events.iter().enumerate() {
        let mut stacks: HashMap<crate::store::StackId, i32> = HashMap::new();
        for row in &ev.result.rows {
            let w = &row.workload;
            let service = Workload::service(&w.unit, &w.container, &row.process_comm).into_owned();
            let key = (service, w.container.to_string());
            let r = *index.entry(key.clone()).or_insert_with(|| {
                resources.push((key, Vec::new()));
                resources.len() - 1
            });
            let profiles = &mut resources[r].1;
            while profiles.len() <= e {
                profiles.push(otel::Profile::default());
            }
            let stack = match stacks.get(&row.stack) {
                Some(&s) => s,
                None => {
                    // Leaf first, as pprof and OTLP list locations.
                    let frames: Vec<Frame> = ev.result.frames(row.stack).cloned().collect();
                    let locs = frames.iter().rev().map(|f| dict.location(f)).collect();
                    let s = dict.stack(locs);
                    stacks.insert(row.stack, s);
                    s
                }
            };
            let mut attrs = Vec::with_capacity(4);
            if row.pid != crate::shared::Pid::EXITED {
                attrs.push(dict.attr(
                    "process.pid",
                    &row.pid.0.to_string(),
                    Some(i64::from(row.pid.0)),
                ));
            }
            attrs.push(dict.attr("process.executable.name", &row.process_comm, None));
            if !w.exe.is_empty() {
                attrs.push(dict.attr("process.executable.path", &w.exe, None));
            }
            attrs.push(dict.attr("thread.name", &row.thread_comm, None));
            profiles[e].samples.push(otel::Sample {
                stack_index: stack,
                attribute_indices: attrs,
                link_index: 0,
                values: vec![row.value.min(i64::MAX as u64) as i64],
                timestamps_unix_nano: Vec::new(),
            });
        }
    }
    let time_unix_nano = from.saturating_mul(1_000_000_000);
    let duration_nano = to.saturating_sub(from).saturating_mul(1_000_000_000);
    let mut resource_profiles = Vec::with_capacity(resources.len());
    for ((service, container), mut profiles) in resources {
        for (e, p) in profiles.iter_mut().enumerate() {
            let ev = &events[e];
            p.sample_type = Some(dict.value_type(ev.sample_type));
            if let Some((ty, period)) = ev.period {
                p.period_type = Some(dict.value_type(ty));
                p.period = period;
            }
            p.time_unix_nano = time_unix_nano;
            p.duration_nano = duration_nano;
        }
        // Events without samples of this service leave no profile.
        profiles.retain(|p| !p.samples.is_empty());
        let mut attributes = vec![kv("service.name", &service), kv("host.name", host)];
        if !container.is_empty() {
            attributes.push(kv("container.id", &container));
        }
        resource_profiles.push(otel::ResourceProfiles {
            resource: Some(Resource {
                attributes,
                ..Default::default()
            }),
            scope_profiles: vec![otel::ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "emberd".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        });
    }
    ExportProfilesServiceRequest {
        resource_profiles,
        dictionary: Some(dict.d),
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `profile.frame.type` as the OpenTelemetry profiler writes it: Java
    /// methods `jvm` (compiled, interpreted or inlined), Python `cpython`,
    /// and the JVM's stubs, native code like any other.
    #[test]
    fn frames_carry_the_type_the_opentelemetry_profiler_gives_them() {
        let mut d = Dictionary::new();
        let mut kind = |name: &str, k: FrameKind| {
            let l = d.location(&Frame::new(name, k)) as usize;
            let a = d.d.location_table[l].attribute_indices[0] as usize;
            let kv = &d.d.attribute_table[a];
            assert_eq!(
                d.d.string_table[kv.key_strindex as usize],
                "profile.frame.type"
            );
            match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                v => panic!("{v:?}"),
            }
        };
        assert_eq!(kind("Jobs.outerJob", FrameKind::Java), "jvm");
        assert_eq!(kind("Jobs.leafWork", FrameKind::JavaInlined), "jvm");
        assert_eq!(kind("outerJob (app.js)", FrameKind::JavaScript), "v8js");
        assert_eq!(kind("[jvm: call stub]", FrameKind::User), "native");
        assert_eq!(kind("leaf (app.py)", FrameKind::Python), "cpython");
        assert_eq!(kind("schedule", FrameKind::Kernel), "kernel");
        assert_eq!(kind("inlined_helper", FrameKind::Inlined), "native");
    }
}
