// @ts-check
// Every version a peer states or checks, in one place (mirror of daisychain/p2p/versions.py;
// docs/PROTOCOL.md "Version handshake"). Each is defined once, where its declarations live
// (messages.js, frames.js, signaling.js, the numerical contract); the protocol machine takes
// them from here and from nowhere else.
//
// - SIGNALING_VERSION: `hello` to the server, echoed in `welcome`;
// - DATA_PROTOCOL_VERSION: `hello.version` on every data channel (`version-mismatch`);
// - CONTRACT_VERSION: `hello.contract` on every data channel, checkpoints, golden vectors;
// - FRAME_VERSION: byte 2 of every binary frame (`bad-frame`).

export { DATA_PROTOCOL_VERSION } from './messages.js';
export { FRAME_VERSION } from './frames.js';
export { SIGNALING_VERSION } from './signaling.js';
export { CONTRACT_VERSION } from '../numerics/index.js';
