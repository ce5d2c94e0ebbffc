// @ts-check
// The training worker of the tests that lose a device (tests/browser/test_browser_worker.py):
// the product's request loop (static/js/train/serve.js) around fault_trainer.js's FaultTrainer,
// which also serves the test request inject-fault. Started by a test page as
//   new TrainWorker({url: '/repo/tests/pages/fault_worker.js'})
// through tests/repo_route.py; the server never serves this file.

import { serveTrainer } from '../../static/js/train/serve.js';
import { FaultTrainer, parseTestRequest } from './fault_trainer.js';

// This module runs as a dedicated worker (tests/jscheck/tsconfig.worker.json: the WebWorker lib).
const scope = /** @type {DedicatedWorkerGlobalScope} */ (/** @type {unknown} */ (self));

serveTrainer(scope, (emit) => new FaultTrainer(emit), parseTestRequest);
