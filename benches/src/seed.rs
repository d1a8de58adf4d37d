//! A large stream on a throwaway redis-server, for the benchmarks of what reads it (the
//! inspector, the dashboard): stream `jobs`, group `workers`, `n` entries all pending over
//! three consumers, and a dead letter for every `dead_every`-th entry in `{jobs}:dead`.

/// Fills the server at `url`, 5 000 entries a pipeline.
pub async fn pending_and_dead(url: &str, n: usize, dead_every: usize) -> redis::RedisResult<()> {
    let client = redis::Client::open(url)?;
    let mut con = client.get_multiplexed_async_connection().await?;
    redis::cmd("XGROUP")
        .arg(&["CREATE", "jobs", "workers", "0", "MKSTREAM"][..])
        .query_async::<()>(&mut con)
        .await?;
    for chunk in (0..n).collect::<Vec<_>>().chunks(5_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("XADD")
                .arg(&["jobs", "*", "data"][..])
                .arg(format!("{{\"n\":{i}}}"))
                .ignore();
            if i % dead_every.max(1) == 0 {
                pipe.cmd("XADD")
                    .arg(
                        &[
                            "{jobs}:dead",
                            "*",
                            "id",
                            "1-1",
                            "reason",
                            "rejected: bad input",
                        ][..],
                    )
                    .arg(&["deliveries", "3", "data"][..])
                    .arg(format!("{{\"n\":{i}}}"))
                    .ignore();
            }
        }
        pipe.query_async::<()>(&mut con).await?;
    }
    // Three consumers take everything: n pending entries.
    for consumer in ["a", "b", "c"] {
        redis::cmd("XREADGROUP")
            .arg(&["GROUP", "workers", consumer, "COUNT"][..])
            .arg(n.div_ceil(3))
            .arg(&["STREAMS", "jobs", ">"][..])
            .query_async::<redis::Value>(&mut con)
            .await?;
    }
    Ok(())
}
