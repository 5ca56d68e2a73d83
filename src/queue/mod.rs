//! Queues of work items (Curator's `queue` package): [`DistributedQueue`] (first in, first
//! out), [`DistributedPriorityQueue`] and [`DistributedDelayQueue`], on Curator's nodes, each
//! taken from at least once ([`Queue::take`]) or exactly once
//! ([`Queue::take_once`]). See `recipes/queue.md` for the protocol and what each
//! promises.

mod distributed;
mod envelope;
mod order;

pub use distributed::{
    Delay, DistributedDelayQueue, DistributedPriorityQueue, DistributedQueue, Fifo, Item, Kind,
    Priority, Queue, QueueOptions, Taken,
};
