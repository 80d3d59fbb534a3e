//! Cancellation and task tracking, handed to every service: one token says "stop", one tracker
//! knows every task so that shutdown can wait for them to finish.

use std::future::Future;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[derive(Clone, Default)]
pub struct Shutdown {
    token: CancellationToken,
    tracker: TaskTracker,
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Asks every service to stop.
    pub fn trigger(&self) {
        self.token.cancel();
    }

    pub fn is_triggered(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Resolves when shutdown has been asked for; `select!` on it in every loop.
    pub async fn wait(&self) {
        self.token.cancelled().await
    }

    /// Spawns a tracked task.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(task)
    }

    /// Triggers shutdown and waits for every tracked task to end.
    pub async fn stop_and_wait(&self) {
        self.trigger();
        self.tracker.close();
        self.tracker.wait().await;
    }
}
