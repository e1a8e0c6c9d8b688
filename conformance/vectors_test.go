package conformance

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward"
	"github.com/veraison/go-cose"
	"github.com/zeebo/blake3"
)

const v1 = "v1"

// TestVectorsStable regenerates the v1 vectors and requires the committed
// files byte for byte.
func TestVectorsStable(t *testing.T) {
	v, err := ReferenceV1()
	if err != nil {
		t.Fatal(err)
	}
	files, err := v.Files()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(v1, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from a fresh reference serve; if the change is intended, run\n\tgo run ./conformance/cmd/gen-vectors conformance/v1", name)
		}
	}
}

// readHex reads a committed .hex file.
func readHex(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(v1, name))
	if err != nil {
		t.Fatal(err)
	}
	out, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

func readMeta(t *testing.T) Meta {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(v1, MetaFile))
	if err != nil {
		t.Fatal(err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestVectorsVerify checks the committed vectors from the files alone:
// the envelope verifies under meta.json's key, and every expected id
// follows from the inputs meta.json records.
func TestVectorsVerify(t *testing.T) {
	m := readMeta(t)
	core, env := readHex(t, SignedCoreFile), readHex(t, EnvelopeFile)
	pub := ed25519.PublicKey(mustHex(t, m.Steward.PublicKeyHex))
	if !pub.Equal(ed25519.NewKeyFromSeed(mustHex(t, m.Steward.SeedHex)).Public()) {
		t.Fatal("meta.json's public key is not its seed's")
	}
	sealed, err := receipt.Open(env, pub)
	if err != nil {
		t.Fatalf("envelope.hex does not verify under meta.json's key: %v", err)
	}
	if !bytes.Equal(sealed.Core, core) {
		t.Fatal("envelope.hex does not carry signed_core.hex")
	}
	r := sealed.Receipt
	if r.Steward != m.Steward.DID || sealed.ID.String() != m.Expected.EnvelopeID || receipt.Sum(core).String() != m.Expected.SignedCoreID {
		t.Fatalf("ids: steward %s envelope %s core %s", r.Steward, sealed.ID, receipt.Sum(core))
	}

	// The request: its canonical form decodes to the request recorded and
	// hashes to the expected request_id, which the receipt carries.
	req, err := receipt.DecodeRequest(mustHex(t, m.Request.CanonicalHex))
	if err != nil {
		t.Fatal(err)
	}
	id, _ := req.ID()
	if id.String() != m.Expected.RequestID || r.RequestID != id || id != mustID(t, m.Request.ServeRequest) {
		t.Fatalf("request id %s, expected %s, receipt %s", id, m.Expected.RequestID, r.RequestID)
	}
	if req.PromptHash != receipt.PromptHash([]byte(m.Prompt.Text)) {
		t.Fatal("prompt_hash is not BLAKE3 of the prompt text")
	}

	// The opening is derived from the seed as README assumption 20 states:
	// K = derive_key(context, seed), opening = keyed(K, request_id ‖ nonce).
	var k [32]byte
	blake3.DeriveKey("meshnode 2026 mesh/1 output commitment opening key", mustHex(t, m.Steward.SeedHex), k[:])
	h, err := blake3.NewKeyed(k[:])
	if err != nil {
		t.Fatal(err)
	}
	h.Write(r.RequestID[:])
	h.Write(r.Nonce[:])
	if got := hex.EncodeToString(h.Sum(nil)); got != m.Expected.Opening || r.Nonce.String() != m.NonceHex {
		t.Fatalf("opening from the seed %s, meta.json records %s", got, m.Expected.Opening)
	}
	// The commitment opens with the recorded opening over the recorded
	// prompt ids and output.
	var opening receipt.Opening
	copy(opening[:], mustHex(t, m.Expected.Opening))
	payload := receipt.PayloadDigest(m.Prompt.TokenIDs)
	d := receipt.Disclosure{Opening: opening, Payload: payload, Output: m.Outcome.OutputTokenIDs}
	if payload.String() != m.Expected.PromptPayload || !d.Opens(&r) || r.OutputCommitment.String() != m.Expected.OutputCommitment {
		t.Fatal("the recorded opening, payload and output do not open the receipt's commitment")
	}
	if uj, _ := r.UJPerAcceptedToken(); uj != m.Meter.EstimatedUJ/uint64(len(m.Outcome.OutputTokenIDs)) || uj != m.Expected.UJPerAcceptedToken {
		t.Fatalf("uj_per_accepted_token %d", uj)
	}
	if r.Route != m.Route.Justification || r.Backend != m.Route.Candidates[m.Route.Chosen].Backend {
		t.Fatal("receipt's route is not the recorded route's")
	}
}

func mustID(t *testing.T, r receipt.ServeRequest) receipt.ContentID {
	t.Helper()
	id, err := r.ID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestEnvelopeReproducible rebuilds envelope.hex from signed_core.hex and
// the seed with go-cose directly, as §7 requires another implementation
// to be able to.
func TestEnvelopeReproducible(t *testing.T) {
	m := readMeta(t)
	key := ed25519.NewKeyFromSeed(mustHex(t, m.Steward.SeedHex))
	signer, err := cose.NewSigner(cose.AlgorithmEdDSA, key)
	if err != nil {
		t.Fatal(err)
	}
	headers := cose.Headers{Protected: cose.ProtectedHeader{
		cose.HeaderLabelAlgorithm: cose.AlgorithmEdDSA,
		cose.HeaderLabelKeyID:     []byte(m.Steward.DID),
	}}
	env, err := cose.Sign1(nil, signer, headers, readHex(t, SignedCoreFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(env, readHex(t, EnvelopeFile)) {
		t.Fatalf("envelope rebuilt from the core and seed differs:\n got %x\nwant %x", env, readHex(t, EnvelopeFile))
	}
}

// TestReferenceOutputRecomputable recomputes the output tokens from the
// documented reference algorithm and the recorded prompt ids.
func TestReferenceOutputRecomputable(t *testing.T) {
	m := readMeta(t)
	msg := []byte("mesh-reference prefill\x00")
	for _, id := range m.Prompt.TokenIDs {
		msg = binary.LittleEndian.AppendUint32(msg, id)
	}
	state := blake3.Sum256(msg)
	var want []uint32
	for range m.Request.MaxTokens {
		for range 256 {
			state = blake3.Sum256(state[:])
		}
		want = append(want, binary.LittleEndian.Uint32(state[:4])%32000)
	}
	if !slices.Equal(want, m.Outcome.OutputTokenIDs) {
		t.Fatalf("recomputed output %v, recorded %v", want, m.Outcome.OutputTokenIDs)
	}
}

// TestVectorReplays re-executes the reference serve on the reference
// backend and reaches the verdict "verified".
func TestVectorReplays(t *testing.T) {
	m := readMeta(t)
	sealed, err := receipt.Open(readHex(t, EnvelopeFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	var opening receipt.Opening
	copy(opening[:], mustHex(t, m.Expected.Opening))
	var mid steward.Backend
	for _, b := range ReferenceBackends() {
		if b.Name == sealed.Receipt.Backend {
			mid = b
		}
	}
	v, err := steward.Replay(t.Context(), mid, &sealed.Receipt, receipt.Replay{Request: m.Request.ServeRequest, Prompt: m.Prompt.TokenIDs, Opening: opening})
	if err != nil || v.Kind != receipt.Verified {
		t.Fatalf("replay of the vector: %v, %v", v, err)
	}
}
