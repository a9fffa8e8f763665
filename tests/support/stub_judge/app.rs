//! A small agent app for `invoke_app`: `POST /agent` with `{"query": ...}` answers with a
//! response and the trajectory of the tools it "used"; `{"fail": 503}` answers that status.

use super::*;

pub(super) async fn agent(shared: &Shared, req: &Req) -> Resp {
    tokio::time::sleep(shared.config.latency).await;
    let asked = req
        .json
        .as_ref()
        .and_then(|b| b.get("query"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    lock(&shared.log).push(RequestRecord {
        last_user_message: Some(asked.clone()),
        status: Some(200),
        ..req.record()
    });
    if let Some(code) = req
        .json
        .as_ref()
        .and_then(|b| b.get("fail"))
        .and_then(Value::as_u64)
    {
        let status = StatusCode::from_u16(code as u16).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return error_response(status, "the agent failed", "server_error", None);
    }
    let city = asked
        .rsplit(' ')
        .next()
        .unwrap_or("")
        .trim_end_matches('?')
        .to_string();
    json_response(
        StatusCode::OK,
        &json!({
            "response": format!("The weather in {city} is sunny."),
            "trajectory": [
                {"tool_name": "get_weather", "tool_input": {"city": city}},
                {"tool_name": "format_answer", "tool_input": {}}
            ]
        }),
    )
}
