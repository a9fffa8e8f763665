//! OpenAI's and Azure's Files and Batches APIs: uploads, batches that finish after
//! `batch_delay`, their output and error files.

use super::*;

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The file part of a `multipart/form-data` body.
pub(super) fn multipart_file(content_type: &str, body: &[u8]) -> Option<String> {
    let boundary = content_type.split("boundary=").nth(1)?.trim_matches('"');
    let text = std::str::from_utf8(body).ok()?;
    let delimiter = format!("--{boundary}");
    text.split(&delimiter)
        .find(|part| part.contains("name=\"file\""))
        .and_then(|part| part.split_once("\r\n\r\n"))
        .map(|(_, content)| content.strip_suffix("\r\n").unwrap_or(content).to_string())
}

pub(super) fn batch_json(b: &StubBatch) -> Value {
    let (status, output, error, completed, failed) = match (&b.finished, b.cancelled) {
        (Some((status, output, error, completed, failed)), _) => (
            status.clone(),
            output.clone(),
            error.clone(),
            *completed,
            *failed,
        ),
        (None, true) => ("cancelling".to_string(), None, None, 0, 0),
        (None, false) => ("in_progress".to_string(), None, None, 0, 0),
    };
    json!({
        "id": b.id,
        "object": "batch",
        "endpoint": b.endpoint,
        "input_file_id": b.input_file_id,
        "completion_window": "24h",
        "status": status,
        "output_file_id": output,
        "error_file_id": error,
        "created_at": b.created_unix,
        "request_counts": {"total": b.lines, "completed": completed, "failed": failed},
        "errors": null,
    })
}

/// Finishes a batch whose time has come: every line answered as the chat endpoint would,
/// directives and `batch_fail_share` failures as error lines, expiry or cancellation as
/// `batch_expired` / `batch_cancelled` errors.
pub(super) fn finish_batch(shared: &Shared, index: usize) {
    let (batch, expire) = {
        let batches = lock(&shared.batches);
        let b = batches[index].clone();
        if b.finished.is_some() || (!b.cancelled && b.created.elapsed() < shared.config.batch_delay)
        {
            return;
        }
        (b, index < shared.config.batch_expire_first)
    };
    let input = lock(&shared.files)
        .get(&batch.input_file_id)
        .cloned()
        .unwrap_or_default();
    let lines: Vec<Value> = input
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let (mut output, mut errors) = (String::new(), String::new());
    let (mut completed, mut failed) = (0u64, 0u64);
    for (i, line) in lines.iter().enumerate() {
        let unfinished = if batch.cancelled {
            Some(("batch_cancelled", "The batch was cancelled."))
        } else if expire && i >= lines.len() / 2 {
            Some((
                "batch_expired",
                "This request could not be executed before the completion window expired.",
            ))
        } else {
            None
        };
        let request_id = format!("{}-{i}", batch.id);
        match answer_line(shared, &request_id, i, line, unfinished) {
            Ok(text) => {
                completed += 1;
                output.push_str(&text);
                output.push('\n');
            }
            Err(text) => {
                failed += 1;
                errors.push_str(&text);
                errors.push('\n');
            }
        }
    }
    let mut files = lock(&shared.files);
    let mut file = |text: String, kind: &str| {
        (!text.is_empty()).then(|| {
            let id = format!("file-{kind}-{}-{}", batch.id, files.len());
            files.insert(id.clone(), text);
            id
        })
    };
    let output_id = file(output, "out");
    let error_id = file(errors, "err");
    let status = if batch.cancelled {
        "cancelled"
    } else if expire {
        "expired"
    } else {
        "completed"
    };
    lock(&shared.batches)[index].finished =
        Some((status.to_string(), output_id, error_id, completed, failed));
}

/// One line of a batch's output (`Ok`) or error file (`Err`): as the chat endpoint would
/// answer it (directives included, and `batch_fail_share` of first submissions failing), or
/// the error of a batch that was cancelled or expired (`unfinished`).
fn answer_line(
    shared: &Shared,
    request_id: &str,
    i: usize,
    line: &Value,
    unfinished: Option<(&str, &str)>,
) -> Result<String, String> {
    let custom_id = line.get("custom_id").and_then(Value::as_str).unwrap_or("");
    if let Some((code, message)) = unfinished {
        return Err(
            json!({"id": request_id, "custom_id": custom_id, "response": null,
                          "error": {"code": code, "message": message}})
            .to_string(),
        );
    }
    let body = line.get("body").cloned().unwrap_or(Value::Null);
    let last_user = last_user_text(&body).unwrap_or_default();
    let submission = {
        let mut subs = lock(&shared.line_submissions);
        let n = subs.entry(custom_id.to_string()).or_insert(0);
        *n += 1;
        *n
    };
    shared.batch_lines.fetch_add(1, Ordering::SeqCst);
    let first_answer = lock(&shared.distinct_lines).insert(custom_id.to_string());
    let directive = parse_fault_directive(&last_user).and_then(|(fault, limit)| {
        let attempt = {
            let mut counts = lock(&shared.fault_counts);
            let n = counts.entry(last_user.clone()).or_insert(0);
            *n += 1;
            *n
        };
        limit.is_none_or(|l| attempt <= l).then_some(fault)
    });
    let share = shared.config.batch_fail_share;
    let draw = (splitmix64(fnv1a(custom_id.as_bytes())) >> 11) as f64 / (1u64 << 53) as f64;
    let status = match directive {
        Some(f) => f.status().filter(|s| *s != 200).unwrap_or(500),
        None if submission == 1 && draw < share => 500,
        None => 200,
    };
    if status != 200 {
        return Err(json!({"id": request_id, "custom_id": custom_id,
                          "response": {"status_code": status, "request_id": request_id,
                                       "body": {"error": {"message": format!("stub batch line failed with {status}"),
                                                          "type": "server_error"}}},
                          "error": null})
        .to_string());
    }
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("stub-model")
        .to_string();
    let judgement = judge(&body, &last_user, &shared.config);
    // A line's results read again are the same reply, counted once.
    let cached = if first_answer {
        count_usage(shared, &body)
    } else {
        cached_tokens(&shared.prefixes, &body)
    };
    let mut reply = completion_json_cached(
        i as u64,
        &model,
        &body,
        Value::String(judgement.content.clone()),
        "stop",
        cached,
    );
    if shared.config.logprobs {
        judgement.add_logprobs(&body, &mut reply);
    }
    Ok(json!({"id": request_id, "custom_id": custom_id,
              "response": {"status_code": 200, "request_id": request_id, "body": reply},
              "error": null})
    .to_string())
}

/// `rest` is the path after `/v1/` or `/openai/`.
pub(super) fn batch_api(
    shared: &Shared,
    method: &str,
    rest: &str,
    content_type: &str,
    body: &[u8],
) -> Resp {
    let segments: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    match (method, segments.as_slice()) {
        ("POST", ["files"]) => upload_file(shared, content_type, body),
        ("GET", ["files", id, "content"]) => file_content(shared, id),
        ("POST", ["batches"]) => create_batch(shared, body),
        ("GET", ["batches"]) => list_batches(shared),
        ("GET", ["batches", id]) => get_batch(shared, id),
        ("POST", ["batches", id, "cancel"]) => cancel_batch(shared, id),
        _ => not_found(),
    }
}

fn not_found() -> Resp {
    error_response(
        StatusCode::NOT_FOUND,
        "No such object.",
        "invalid_request_error",
        None,
    )
}

fn bad_request(message: &str) -> Resp {
    error_response(
        StatusCode::BAD_REQUEST,
        message,
        "invalid_request_error",
        None,
    )
}

/// `POST files`: a multipart upload of a batch's input.
fn upload_file(shared: &Shared, content_type: &str, body: &[u8]) -> Resp {
    let Some(content) = multipart_file(content_type, body) else {
        return bad_request("expected a multipart body with a file part");
    };
    let mut files = lock(&shared.files);
    let id = format!("file-in-{}", files.len());
    let bytes = content.len();
    files.insert(id.clone(), content);
    json_response(
        StatusCode::OK,
        &json!({"id": id, "object": "file", "bytes": bytes, "purpose": "batch",
                "filename": "batch.jsonl", "created_at": unix_now()}),
    )
}

/// `GET files/{id}/content`.
fn file_content(shared: &Shared, id: &str) -> Resp {
    match lock(&shared.files).get(id) {
        Some(text) => {
            let mut r = Response::new(Full::new(Bytes::from(text.clone())));
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            r
        }
        None => not_found(),
    }
}

/// `POST batches` over an uploaded file.
fn create_batch(shared: &Shared, body: &[u8]) -> Resp {
    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let Some(file) = request.get("input_file_id").and_then(Value::as_str) else {
        return bad_request("input_file_id is required");
    };
    let Some(lines) = lock(&shared.files)
        .get(file)
        .map(|t| t.lines().count() as u64)
    else {
        return bad_request("No such file.");
    };
    let mut batches = lock(&shared.batches);
    let batch = StubBatch {
        id: format!("batch_stub_{}", batches.len()),
        input_file_id: file.to_string(),
        endpoint: request
            .get("endpoint")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        created: std::time::Instant::now(),
        created_unix: unix_now(),
        cancelled: false,
        finished: None,
        lines,
    };
    let reply = batch_json(&batch);
    batches.push(batch);
    json_response(StatusCode::OK, &reply)
}

/// `GET batches`: every batch, newest first, those whose time has come finished.
fn list_batches(shared: &Shared) -> Resp {
    let count = lock(&shared.batches).len();
    for i in 0..count {
        finish_batch(shared, i);
    }
    let data: Vec<Value> = lock(&shared.batches).iter().rev().map(batch_json).collect();
    json_response(
        StatusCode::OK,
        &json!({"object": "list", "data": data, "has_more": false}),
    )
}

/// `GET batches/{id}`.
fn get_batch(shared: &Shared, id: &str) -> Resp {
    let Some(index) = lock(&shared.batches).iter().position(|b| b.id == id) else {
        return not_found();
    };
    finish_batch(shared, index);
    let b = lock(&shared.batches)[index].clone();
    json_response(StatusCode::OK, &batch_json(&b))
}

/// `POST batches/{id}/cancel`: a batch not yet finished ends cancelled.
fn cancel_batch(shared: &Shared, id: &str) -> Resp {
    let mut batches = lock(&shared.batches);
    let Some(b) = batches.iter_mut().find(|b| b.id == id) else {
        return not_found();
    };
    if b.finished.is_none() {
        b.cancelled = true;
    }
    json_response(StatusCode::OK, &batch_json(b))
}

/// The path after `/v1/` or `/openai/` of a Files or Batches API request.
pub(super) fn route(path: &str) -> Option<String> {
    path.strip_prefix("/v1/")
        .or_else(|| path.strip_prefix("/openai/"))
        .filter(|r| r.starts_with("files") || r.starts_with("batches"))
        .map(str::to_string)
}

/// A Files or Batches API request (`rest` from [`route`]), logged.
pub(super) async fn handle(shared: &Shared, req: &Req, rest: &str) -> Resp {
    tokio::time::sleep(shared.config.latency).await;
    let reply = if req.authorised(shared.config.require_key.as_deref()) {
        let content_type = req.header("content-type").unwrap_or_default();
        batch_api(shared, req.method.as_str(), rest, &content_type, &req.body)
    } else {
        error_response(
            StatusCode::UNAUTHORIZED,
            "Incorrect API key provided.",
            "invalid_request_error",
            Some("invalid_api_key"),
        )
    };
    lock(&shared.log).push(RequestRecord {
        api_version: query_param(req.query.as_deref(), "api-version"),
        status: Some(reply.status().as_u16()),
        ..req.record()
    });
    reply
}
