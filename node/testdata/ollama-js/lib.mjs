// Shared by the cases: a client for the node under test
// (node/sdk_test.go sets MESHNODE_BASE_URL and MESHNODE_MODEL).
import { Ollama } from 'ollama';

export const model = process.env.MESHNODE_MODEL;
export const client = new Ollama({ host: process.env.MESHNODE_BASE_URL }); // the node's root: the library adds /api/...
