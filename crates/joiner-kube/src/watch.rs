//! The task that keeps one kind's cache: kube's watcher, with its default backoff, into a
//! [`KindCache`].

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use joiner_controller::store::Resource;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use crate::cache::KindCache;
use crate::typed::Typed;

/// Pause before a fresh watcher after one was abandoned, so a server that keeps refusing cannot
/// make this a busy loop.
const RESTART_PAUSE: Duration = Duration::from_millis(500);

/// Runs until aborted. Every object event bumps `changes`.
///
/// kube's watcher re-lists by itself when a watch reports `410 Gone` as an `ERROR` event, and
/// keeps the cache (the reflector swaps in a new list only when it is complete). When the
/// server refuses to *start* a watch with HTTP 410 (the version it was asked to resume from is
/// compacted), the watcher would retry the same version forever; this loop then drops it and
/// starts a fresh one, which lists again.
pub(crate) async fn run<K: Resource>(
    api: Api<Typed<K>>,
    config: watcher::Config,
    cache: Arc<KindCache<K>>,
    changes: watch::Sender<u64>,
) {
    loop {
        let mut events = watcher(api.clone(), config.clone())
            .default_backoff()
            .boxed();
        while let Some(item) = events.next().await {
            match item {
                Ok(event) => {
                    // managedFields are most of a small object's size and nothing reads them;
                    // an update without them keeps the server's (it never clears them).
                    let event = event.modify(|o| kube::Resource::meta_mut(o).managed_fields = None);
                    if cache.apply(event) {
                        changes.send_modify(|n| *n = n.wrapping_add(1));
                    }
                }
                Err(error) => {
                    cache.failed(&error);
                    if expired_on_watch_start(&error) {
                        tracing::info!(
                            kind = K::KIND,
                            "watch version expired (410 Gone): listing again"
                        );
                        break;
                    }
                }
            }
        }
        tokio::time::sleep(RESTART_PAUSE).await;
    }
}

fn expired_on_watch_start(error: &watcher::Error) -> bool {
    matches!(
        error,
        watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 410
    )
}
