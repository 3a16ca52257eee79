//! The workspace's one least-recently-used order, in two shapes:
//! - [`LruOrder`]: the recency order of the slots of a slab owned elsewhere (the flow-control
//!   core keeps its idle tenants in one, so that the longest idle is forgotten first);
//! - [`SlabLru`]: a slab of values kept in such an order, that allocates their slots itself (the
//!   prefix indexes keep each replica's blocks in one, so that a bound evicts the least recently
//!   used block first, and the slot is what their block maps store to find a block again).
//!
//! Both are linked by index, not by pointer: O(1) to make any member the newest, to remove any
//! member and to find the oldest, no allocation per operation, and 8 bytes of links per slot. They
//! are bounded by their owners: an order's links grow to the highest slot it has seen, a slab's
//! values to the most it has held at once, and [`SlabLru::push_newest`] never reserves past the
//! bound its caller passes.

#![forbid(unsafe_code)]

mod order;
mod slab;

pub use order::{LruOrder, LINK_BYTES, MAX_SLOTS, NIL};
pub use slab::SlabLru;
