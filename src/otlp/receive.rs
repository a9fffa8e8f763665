//! The OTLP listeners: OTLP/HTTP (`POST /v1/traces`, protobuf or JSON, gzip or not) and
//! OTLP/gRPC (`TraceService/Export`), both answering as the OTLP specification says and
//! both handing rows to the [`SpanStore`].
//!
//! Each connection takes one of serve's connection slots (the PostgreSQL clients' cap covers
//! these too), and the OTLP listeners together never hold more than half of them: senders
//! need no password to connect, so they must not be able to lock the SQL clients out. Every
//! request has a deadline, from its first byte to its answer.

use std::convert::Infallible;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use datafusion::arrow::array::RecordBatch;
use evalsql_udfs::spans::{SpanRows, store_schema};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use super::store::{Refused, SpanStore};
use super::tokens::Tokens;

/// What the listeners share.
pub struct Receiver {
    pub store: Arc<SpanStore>,
    pub tokens: Option<Tokens>,
    /// The largest request body, after inflating.
    pub max_body: usize,
    /// From a request's first byte to its answer.
    pub deadline: Duration,
}

/// The rows of a request's spans, and the spans refused (how many, the first reason).
pub fn rows_of(
    request: &ExportTraceServiceRequest,
    source: &str,
    ingested_at: i64,
) -> (Option<RecordBatch>, usize, Option<String>) {
    let mut rows = SpanRows::for_store();
    let mut rejected = 0;
    let mut first: Option<String> = None;
    for rs in &request.resource_spans {
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                let outcome = if span.start_time_unix_nano > i64::MAX as u64
                    || span.end_time_unix_nano > i64::MAX as u64
                {
                    Err("its times lie past 2262 (beyond signed 64-bit nanoseconds)".to_string())
                } else {
                    rows.push(rs.resource.as_ref(), ss.scope.as_ref(), span, source)
                };
                if let Err(why) = outcome {
                    rejected += 1;
                    first.get_or_insert_with(|| format!("span {:?}: {why}", span.name));
                }
            }
        }
    }
    let batch = (rows.rows() > 0).then(|| {
        rows.finish_store(&store_schema(), ingested_at)
            .expect("the builder's columns match the store's schema")
    });
    (batch, rejected, first)
}

fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// Why an export was not (wholly) taken, as both protocols say it.
enum Outcome {
    Taken { rejected: usize, message: String },
    Busy,
    Failed(String),
}

impl Receiver {
    /// Stores `request`'s spans; `refused` are those already refused while decoding it (how
    /// many, the first reason), counted with the rest in the answer.
    async fn export(
        &self,
        request: &ExportTraceServiceRequest,
        source: &str,
        refused: (usize, Option<String>),
    ) -> Outcome {
        let (batch, rejected, first) = rows_of(request, source, now_micros());
        let (rejected, first) = (rejected + refused.0, refused.1.or(first));
        let message = match first {
            Some(why) if rejected > 1 => format!("{rejected} spans refused; the first: {why}"),
            Some(why) => format!("1 span refused: {why}"),
            None => String::new(),
        };
        let Some(batch) = batch else {
            return Outcome::Taken { rejected, message };
        };
        match self.store.append(batch).await {
            Ok(()) => Outcome::Taken { rejected, message },
            Err(Refused::Busy) => Outcome::Busy,
            Err(Refused::Failed(e)) => Outcome::Failed(e),
        }
    }
}

// ---- OTLP/HTTP -----------------------------------------------------------------------------

/// `google.rpc.Status`, the body of an OTLP/HTTP error (its two fields OTLP uses).
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

#[derive(Clone, Copy, PartialEq)]
enum Encoding {
    Protobuf,
    Json,
}

fn reply(status: StatusCode, encoding: Encoding, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(match encoding {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }),
    );
    r
}

fn error(
    status: StatusCode,
    encoding: Encoding,
    grpc_code: i32,
    message: &str,
) -> Response<Full<Bytes>> {
    let body = match encoding {
        Encoding::Protobuf => RpcStatus {
            code: grpc_code,
            message: message.to_string(),
        }
        .encode_to_vec(),
        Encoding::Json => serde_json::to_vec(&serde_json::json!({
            "code": grpc_code,
            "message": message,
        }))
        .expect("JSON"),
    };
    let mut r = reply(status, encoding, body);
    if matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

// gRPC status codes, which OTLP/HTTP's error bodies carry too.
const INVALID_ARGUMENT: i32 = 3;
const RESOURCE_EXHAUSTED: i32 = 8;
const UNIMPLEMENTED: i32 = 12;
const UNAVAILABLE: i32 = 14;
const UNAUTHENTICATED: i32 = 16;

fn success(encoding: Encoding, rejected: usize, message: String) -> Response<Full<Bytes>> {
    let partial_success = (rejected > 0).then(|| ExportTracePartialSuccess {
        rejected_spans: rejected as i64,
        error_message: message.clone(),
    });
    let body = match encoding {
        Encoding::Protobuf => ExportTraceServiceResponse { partial_success }.encode_to_vec(),
        Encoding::Json => {
            let v = if rejected > 0 {
                serde_json::json!({"partialSuccess": {
                    "rejectedSpans": rejected.to_string(),
                    "errorMessage": message,
                }})
            } else {
                serde_json::json!({})
            };
            serde_json::to_vec(&v).expect("JSON")
        }
    };
    reply(StatusCode::OK, encoding, body)
}

/// Inflates a gzip body (every member of it, as gzip allows several), stopping at `limit`
/// bytes: a small bomb costs `limit`, not what it would inflate to.
fn gunzip(body: &[u8], limit: usize) -> Result<Vec<u8>, StatusCode> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(body)
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|_| StatusCode::BAD_REQUEST)?;
    if out.len() > limit {
        return Err(StatusCode::PAYLOAD_TOO_LARGE);
    }
    Ok(out)
}

async fn handle(receiver: Arc<Receiver>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    let encoding = match content_type.as_deref() {
        Some("application/x-protobuf") => Some(Encoding::Protobuf),
        Some("application/json") => Some(Encoding::Json),
        _ => None,
    };
    let shown = encoding.unwrap_or(Encoding::Json);
    if request.uri().path() != "/v1/traces" {
        return error(
            StatusCode::NOT_FOUND,
            shown,
            UNIMPLEMENTED,
            "only /v1/traces is served here",
        );
    }
    if request.method() != Method::POST {
        let mut r = error(
            StatusCode::METHOD_NOT_ALLOWED,
            shown,
            UNIMPLEMENTED,
            "POST only",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    if let Some(tokens) = &receiver.tokens
        && !tokens.admits(
            request
                .headers()
                .get(header::AUTHORIZATION)
                .map(HeaderValue::as_bytes),
        )
    {
        let mut r = error(
            StatusCode::UNAUTHORIZED,
            shown,
            UNAUTHENTICATED,
            "unauthenticated",
        );
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return r;
    }
    let Some(encoding) = encoding else {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            shown,
            INVALID_ARGUMENT,
            "the body must be application/x-protobuf or application/json",
        );
    };
    let gzip = match request
        .headers()
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("identity") | Some("") => false,
        Some("gzip") => true,
        Some(_) => {
            return error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                encoding,
                INVALID_ARGUMENT,
                "Content-Encoding must be gzip or none",
            );
        }
    };
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            encoding,
            RESOURCE_EXHAUSTED,
            &format!("the body is larger than {} bytes", receiver.max_body),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > receiver.max_body as u64) {
        return too_large();
    }
    let body = match Limited::new(request.into_body(), receiver.max_body)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
        Err(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                encoding,
                INVALID_ARGUMENT,
                "the body could not be read",
            );
        }
    };
    let body: Bytes = if gzip {
        match gunzip(&body, receiver.max_body) {
            Ok(b) => Bytes::from(b),
            Err(StatusCode::PAYLOAD_TOO_LARGE) => return too_large(),
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    encoding,
                    INVALID_ARGUMENT,
                    "the body is not gzip",
                );
            }
        }
    } else {
        body
    };
    let (decoded, pre_rejected, pre_first) = match encoding {
        Encoding::Protobuf => match ExportTraceServiceRequest::decode(body) {
            Ok(r) => (r, 0, None),
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    encoding,
                    INVALID_ARGUMENT,
                    &format!("not an ExportTraceServiceRequest: {e}"),
                );
            }
        },
        Encoding::Json => match evalsql_udfs::kernels::otlp::decode_json_request(&body) {
            Ok(r) => r,
            Err(e) => return error(StatusCode::BAD_REQUEST, encoding, INVALID_ARGUMENT, &e),
        },
    };
    match receiver
        .export(&decoded, "otlp/http", (pre_rejected, pre_first))
        .await
    {
        Outcome::Taken { rejected, message } => success(encoding, rejected, message),
        Outcome::Busy => error(
            StatusCode::TOO_MANY_REQUESTS,
            encoding,
            UNAVAILABLE,
            "the store is behind: retry shortly",
        ),
        Outcome::Failed(e) => error(StatusCode::SERVICE_UNAVAILABLE, encoding, UNAVAILABLE, &e),
    }
}

// ---- OTLP/gRPC -----------------------------------------------------------------------------

struct Grpc(Arc<Receiver>);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        if let Some(tokens) = &self.0.tokens
            && !tokens.admits(
                request
                    .metadata()
                    .get("authorization")
                    .map(|v| v.as_bytes()),
            )
        {
            return Err(tonic::Status::unauthenticated("unauthenticated"));
        }
        let exported = tokio::time::timeout(
            self.0.deadline,
            self.0.export(request.get_ref(), "otlp/grpc", (0, None)),
        )
        .await
        .map_err(|_| {
            tonic::Status::deadline_exceeded("the request took longer than its deadline")
        })?;
        match exported {
            Outcome::Taken { rejected, message } => {
                Ok(tonic::Response::new(ExportTraceServiceResponse {
                    partial_success: (rejected > 0).then(|| ExportTracePartialSuccess {
                        rejected_spans: rejected as i64,
                        error_message: message,
                    }),
                }))
            }
            Outcome::Busy => Err(tonic::Status::unavailable(
                "the store is behind: retry shortly",
            )),
            Outcome::Failed(e) => Err(tonic::Status::unavailable(e)),
        }
    }
}

// ---- Listening -----------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
pub enum Protocol {
    Http,
    Grpc,
}

/// TLS for the OTLP listeners: serve's certificate, with ALPN for HTTP/2 (gRPC) and
/// HTTP/1.1.
pub fn tls_acceptor(mut config: rustls::ServerConfig, protocol: Protocol) -> TlsAcceptor {
    config.alpn_protocols = match protocol {
        Protocol::Grpc => vec![b"h2".to_vec()],
        Protocol::Http => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    };
    TlsAcceptor::from(Arc::new(config))
}

/// Accepts connections on `listener` until the process ends.
pub async fn listen(
    listener: TcpListener,
    protocol: Protocol,
    receiver: Arc<Receiver>,
    tls: Option<TlsAcceptor>,
    slots: Arc<Semaphore>,
    own: Arc<Semaphore>,
) {
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors, say: wait rather than spin.
                log::warn!("otlp: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (Ok(own_slot), Ok(slot)) = (
            Arc::clone(&own).try_acquire_owned(),
            Arc::clone(&slots).try_acquire_owned(),
        ) else {
            // Every slot taken: close at once (the exporter retries later).
            drop(socket);
            continue;
        };
        let (receiver, tls) = (Arc::clone(&receiver), tls.clone());
        tokio::spawn(async move {
            let _slots = (slot, own_slot);
            let _ = socket.set_nodelay(true);
            match tls {
                Some(tls) => {
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(receiver.deadline, tls.accept(socket)).await
                    else {
                        return;
                    };
                    serve(stream, peer, protocol, receiver).await;
                }
                None => serve(socket, peer, protocol, receiver).await,
            }
        });
    }
}

async fn serve<IO>(io: IO, peer: SocketAddr, protocol: Protocol, receiver: Arc<Receiver>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let deadline = receiver.deadline;
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(deadline)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20))
        .max_concurrent_streams(64);
    let io = TokioIo::new(io);
    let outcome = match protocol {
        Protocol::Http => {
            let service = hyper::service::service_fn(move |request| {
                let receiver = Arc::clone(&receiver);
                async move {
                    let answer =
                        tokio::time::timeout(deadline, handle(Arc::clone(&receiver), request))
                            .await
                            .unwrap_or_else(|_| {
                                error(
                                    StatusCode::REQUEST_TIMEOUT,
                                    Encoding::Json,
                                    UNAVAILABLE,
                                    "the request took longer than its deadline",
                                )
                            });
                    Ok::<_, Infallible>(answer)
                }
            });
            builder.serve_connection(io, service).await
        }
        Protocol::Grpc => {
            let max = receiver.max_body;
            let grpc = TraceServiceServer::new(Grpc(receiver)).max_decoding_message_size(max);
            let service = hyper_util::service::TowerToHyperService::new(grpc);
            builder.http2_only().serve_connection(io, service).await
        }
    };
    if let Err(e) = outcome {
        log::debug!("otlp connection from {peer}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn inflating_stops_at_the_limit() {
        let member = gzip(&vec![0u8; 1 << 20]);
        assert_eq!(gunzip(&member, 2 << 20).unwrap().len(), 1 << 20);
        // Several members are one body, and a bomb of them stops at the limit.
        let two = member.repeat(2);
        assert_eq!(gunzip(&two, 4 << 20).unwrap().len(), 2 << 20);
        let bomb = member.repeat(64);
        assert_eq!(gunzip(&bomb, 16 << 20), Err(StatusCode::PAYLOAD_TOO_LARGE));
        assert_eq!(gunzip(b"not gzip", 1 << 20), Err(StatusCode::BAD_REQUEST));
    }
}
