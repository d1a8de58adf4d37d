//! The command queue on the in-memory store: `cargo run -p leasehold --example commands`

use std::time::Duration;

use leasehold::commands::{
    Command, CommandContext, CommandHandler, CommandQueue, HandlerError, MemoryCommandStore,
    Status, Step,
};
use leasehold::memory::{MemoryStream, StreamConfig};
use leasehold::tokio::TokioRuntime;

struct Provision;

impl CommandHandler for Provision {
    type Params = String; // the VM's name
    type Output = String; // its address

    async fn execute(
        &self,
        ctx: CommandContext,
        _name: String,
    ) -> Result<Step<String>, HandlerError> {
        // Start the work keyed by ctx.id() (a repeated execute is then harmless) and remember
        // what check_status needs.
        Ok(Step::running_with(format!("op-{}", ctx.id()))?)
    }

    async fn check_status(
        &self,
        ctx: CommandContext,
        name: String,
    ) -> Result<Step<String>, HandlerError> {
        let operation: Option<String> = ctx.checkpoint()?; // what execute stored
        assert!(operation.is_some());
        // ... ask the cloud about the operation; Ok(Step::Running) while it is not done ...
        Ok(Step::Succeeded(format!("{name}.internal:22")))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = MemoryCommandStore::new(MemoryStream::new(StreamConfig::default())?);
    // On Redis: RedisCommandStore::connect(RedisStoreConfig::new("redis://127.0.0.1:6379/", "vms")).await?
    let queue = CommandQueue::new(TokioRuntime::current(), store);
    let worker = queue
        .worker()
        .handler("provision_vm", Provision)
        .status_interval(Duration::from_millis(200))
        .start()
        .await?;

    let submitted = queue
        .submit(Command::new("provision_vm", "web-1")?.with_id("vm-1"))
        .await?;
    let done = queue.wait(submitted.id(), Duration::from_secs(60)).await?;
    assert_eq!(done.status, Status::Succeeded);
    let address: Option<String> = queue.result("vm-1").await?; // typed; a mismatch is an error
    println!("vm-1 is at {address:?}");
    queue.cancel("vm-2").await?; // false when missing or already over
    worker.shutdown(Duration::from_secs(30)).await;
    Ok(())
}
