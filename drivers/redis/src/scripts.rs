//! Every Lua script of the backend, publisher, inspector and command store, in one place beside
//! `lua/`: each is shared helpers followed by its own file, loaded once per connection
//! (`Connection::load_scripts`) and sent by hash.

use std::sync::LazyLock;

use redis::Script;

/// A script made of shared Lua helpers followed by its own file.
macro_rules! script {
    ($($file:literal),+) => {
        LazyLock::new(|| Script::new(concat!($(include_str!($file)),+)))
    };
}

pub(crate) static FETCH: LazyLock<Script> = script!(
    "lua/ids.lua",
    "lua/retention.lua",
    "lua/tenure.lua",
    "lua/last_delivered.lua",
    "lua/delayed.lua",
    "lua/fetch.lua"
);
/// The publisher's: a batch with due times or deduplication keys, and the delayed summary.
pub(crate) static PUBLISH: LazyLock<Script> = script!("lua/delayed.lua", "lua/publish.lua");
pub(crate) static DELAYED_SUMMARY: LazyLock<Script> =
    script!("lua/delayed.lua", "lua/delayed_summary.lua");
/// The fast path's promotion, once its probe saw a delayed message due.
pub(crate) static PROMOTE: LazyLock<Script> = script!("lua/delayed.lua", "lua/promote.lua");
/// Batch scripts share the fence check: by tenure, else one `XPENDING`.
pub(crate) static RENEW: LazyLock<Script> = script!(
    "lua/ids.lua",
    "lua/tenure.lua",
    "lua/fenced_batch.lua",
    "lua/renew.lua"
);
pub(crate) static ACK: LazyLock<Script> = script!(
    "lua/ids.lua",
    "lua/retention.lua",
    "lua/tenure.lua",
    "lua/fenced_batch.lua",
    "lua/ack.lua"
);
pub(crate) static RELEASE: LazyLock<Script> = script!("lua/tenure.lua", "lua/release.lua");
pub(crate) static DEAD_LETTER: LazyLock<Script> =
    script!("lua/ids.lua", "lua/retention.lua", "lua/dead_letter.lua");
pub(crate) static REAP: LazyLock<Script> = script!("lua/reap_consumers.lua");
pub(crate) static CREATE_GROUP: LazyLock<Script> = script!("lua/create_group.lua");

/// The command store's (feature `commands`, `lua/commands/`): every state write moves the
/// command between the status indexes in the same script, so they share `index.lua`.
#[cfg(feature = "commands")]
pub(crate) static COMMAND_SUBMIT: LazyLock<Script> =
    script!("lua/commands/index.lua", "lua/commands/submit.lua");
#[cfg(feature = "commands")]
pub(crate) static COMMAND_CAS: LazyLock<Script> =
    script!("lua/commands/index.lua", "lua/commands/cas.lua");
#[cfg(feature = "commands")]
pub(crate) static COMMAND_LIST: LazyLock<Script> = script!("lua/commands/list.lua");
