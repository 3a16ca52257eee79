//! An engine's streamed answer, whatever it sends: the router's usage scan (which reads the
//! token counts out of the SSE events as they pass) passes every byte through unchanged and
//! never panics, however the bytes are cut into chunks.
#![no_main]

use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use libfuzzer_sys::fuzz_target;
use warmpath_router::body::UsageScan;

thread_local! {
    static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, body)) = data.split_first() else {
        return;
    };
    // Chunks of 1 to 16 bytes, the size chosen by the first byte.
    let size = usize::from(cut % 16) + 1;
    let frames = || {
        body.chunks(size)
            .map(|c| {
                Ok::<_, warmpath_router::errors::BodyError>(Frame::data(Bytes::copy_from_slice(c)))
            })
            .collect::<Vec<_>>()
    };
    for stream in [true, false] {
        let scan = UsageScan::new(
            StreamBody::new(futures_util::stream::iter(frames())),
            Some(|_: u64| {}),
            stream,
        );
        let out = RT
            .with(|rt| rt.block_on(scan.collect()))
            .expect("no error in, none out");
        assert_eq!(&out.to_bytes()[..], body);
    }
});
