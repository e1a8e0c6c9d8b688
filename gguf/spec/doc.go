// Package spec is speculative decoding: a cheap proposer drafts the next
// few tokens, the target model evaluates the last token and the drafts
// as one window of a batched step (model.Seq with a logits row per
// token), and the rows decide how many drafts stand. A step reads the
// target's weights once however many rows it holds, so an accepted draft
// is a token that cost the target no extra pass.
//
// Proposers: a draft model with the target's vocabulary (ModelProposer,
// checked by CheckVocab), and prompt lookup (Lookup), which proposes the
// continuation of the latest earlier occurrence of the sequence's suffix
// and needs no second model.
//
// Verification (Verify) is exact. Greedy requests accept a draft while it
// is the target's own pick, then take the target's pick after the last
// accepted one: the tokens are those of plain greedy decoding, one for
// one, since a window's rows are the bits one-token decoding gets
// (model.Batch). Sampled requests use the rejection rule of Leviathan et
// al. and Chen et al. (2023): accept a draft x with probability
// min(1, p(x)/q(x)), p and q the target's and the proposer's
// distributions after the request's sampling pipeline; on rejection draw
// from normalise(max(0, p − q)); when every draft stands draw one more
// from p. The tokens are then distributed exactly as the target's. Every
// draw comes from the request's seeded streams, and every decision that
// can change the output (the window's size, when drafting stops, whether
// to speculate at all) is a function of the request, the sequence and
// the proposer — acceptance counts and a draft cost fixed at load, never
// timings — so a seeded serve with the same proposer repeats exactly.
package spec
