// @ts-check
// The sans-IO protocol core of a training peer in JavaScript (docs/PROTOCOL.md, "The protocol
// machine"), module for module the mirror of server/daisychain/p2p/machine/: `events` (what the
// machine is fed, each with `now`), `effects` (what it asks for), `machine` (the rules), and one
// module per piece of state: `peers`, `attempt`, `leadership`, `repair`, `guard`, `statesync`,
// `stopping`, `replica` (the interface of the state the machine steers) and `settings`. Nothing
// here touches a socket, a clock, a timer or the DOM; the same files run in Node and Chromium.

export { Machine, MAX_ROUNDS, sameConfig } from './machine.js';
export { ReplicaRefused, checkReplica } from './replica.js';
export { settings, timers } from './settings.js';
export * as events from './events.js';
export * as effects from './effects.js';
