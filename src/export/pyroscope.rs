//! Grafana Pyroscope's push API: `push.v1.PusherService/Push` over Connect
//! (a unary call is a plain POST of the protobuf message). The messages are
//! declared here with prost's derive, field numbers as in Pyroscope's
//! `api/push/v1/push.proto` and `api/types/v1/types.proto`.

use prost::Message;

use crate::render::pprof::proto::Profile;

#[allow(missing_docs)]
pub mod proto {
    //! push.v1 and types.v1 messages.

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PushRequest {
        #[prost(message, repeated, tag = "1")]
        pub series: Vec<RawProfileSeries>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RawProfileSeries {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<LabelPair>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<RawSample>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RawSample {
        #[prost(bytes = "vec", tag = "1")]
        pub raw_profile: Vec<u8>,
        #[prost(string, tag = "2")]
        pub id: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LabelPair {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }
}

/// `service_name` of the series as a whole: each sample's own
/// `service_name` label splits the host's profile into its services.
pub const HOST_SERVICE: &str = "emberd";

/// The series of one event's profile: `__name__`, `service_name`, `host`,
/// and the gzipped pprof. Per-sample string labels other than the service's
/// (`comm`) are dropped first: Pyroscope makes a series of every distinct
/// label set, and process names would make hundreds.
pub fn series(name: &str, host: &str, mut profile: Profile) -> proto::RawProfileSeries {
    if let Some(comm) = profile.string_table.iter().position(|s| s == "comm") {
        let comm = comm as i64;
        for s in &mut profile.sample {
            s.label.retain(|l| l.key != comm);
        }
    }
    let label = |n: &str, v: &str| proto::LabelPair {
        name: n.to_owned(),
        value: v.to_owned(),
    };
    proto::RawProfileSeries {
        labels: vec![
            label("__name__", name),
            label("service_name", HOST_SERVICE),
            label("host", host),
        ],
        samples: vec![proto::RawSample {
            raw_profile: crate::render::pprof::encode_gzip(&profile),
            id: String::new(),
        }],
    }
}

/// The request body of a push of `series`.
pub fn encode(series: Vec<proto::RawProfileSeries>) -> Vec<u8> {
    proto::PushRequest { series }.encode_to_vec()
}
