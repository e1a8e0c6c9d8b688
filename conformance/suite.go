package conformance

// Status says how far meshnode meets a requirement today.
type Status string

const (
	// Covered: implemented and proved by the tests listed.
	Covered Status = "covered"
	// Hooked: the steward calls a hook at the point the spec sets, and
	// the tests prove the ordering; the implementation behind the hook
	// is a later issue.
	Hooked Status = "hooked"
	// Later: not yet implemented.
	Later Status = "later"
)

// Item is one requirement of mesh-spec §7 (or a section whose MUSTs the
// §7 items rest on), with the tests that prove it. A test is named
// "<package dir>.<TestName>", the package dir relative to the module root.
type Item struct {
	Section     string
	Requirement string
	Status      Status
	Tests       []string
	Note        string
}

// Suite maps mesh/1 §7 to meshnode's tests. TestSuite holds every name
// here to an existing test, so the map cannot go stale silently.
var Suite = []Item{
	{
		Section:     "§7.1",
		Requirement: "decide a serve's grant as a JCP enforcement point and its holder before any work; debit after, recording a breach",
		Status:      Hooked,
		Tests:       []string{"node/steward.TestServeOrder", "node/steward.TestServeRefusals", "node/steward.TestServeWeightsAndTraining"},
		Note:        "Authorizer is called after routing and before the meter opens, over the route's backend, recipe and weights; a refusal runs nothing; Debit.Settle gets the metered energy and its breach label lands on the receipt. Presentation and chain checks arrive with the grants issue.",
	},
	{
		Section:     "§7.2",
		Requirement: "journal each decision before its serve and each receipt before it is handed out; resume spend and chain from the journal",
		Status:      Hooked,
		Tests:       []string{"node/steward.TestJournalFailureHoldsChain", "node/steward.TestResume", "node/steward.TestServeConcurrent"},
		Note:        "Journal.Sealed is called, in chain order, before a receipt is handed out; a refusal withholds it and the chain does not advance; Config.Head resumes the chain. The file journal and replay through the gate arrive with the journal issue.",
	},
	{
		Section:     "§7.3",
		Requirement: "choose the cheapest admissible backend and record every candidate weighed (§4)",
		Status:      Covered,
		Tests:       []string{"node/steward.TestRoute", "node/steward.TestNoAdmissibleServeError", "conformance.TestItem3Routing"},
	},
	{
		Section:     "§7.4",
		Requirement: "meter energy around the engine and tag provenance honestly, enforcing the Energy coupling before sealing (§3.3)",
		Status:      Covered,
		Tests: []string{"hw.TestNewEnergyCoupling", "node/receipt.TestEnergyCouplingAtSeal", "node/receipt.TestDecodeCoreRefuses", "node/receipt.TestReceiptJSON",
			"node/steward.TestServeOrder", "node/steward.TestServeWithHWMeters", "node/steward.TestServeIncomplete", "node/steward.TestServeRefusals", "conformance.TestItem4Metering"},
		Note: "An Energy that breaks the coupling cannot be constructed (hw), a receipt can hold only an Energy, and every decoder rebuilds it through hw.NewEnergy. Live-counter and min-window grading belong to the meters (hw).",
	},
	{
		Section:     "§7.5",
		Requirement: "seal the receipt as a JCR-1 mesh/1 envelope and compute uj_per_accepted_token (§6)",
		Status:      Covered,
		Tests: []string{"node/receipt.TestEnvelopeProfile", "node/receipt.TestOpen", "node/receipt.TestCoreKeys", "node/receipt.TestDerivedFigures", "node/receipt.TestUsageJSON",
			"node/receipt.TestReceiptValidate", "node/steward.TestServeEndToEnd", "node/steward.TestServeDecision",
			"conformance.TestVectorsStable", "conformance.TestVectorsVerify", "conformance.TestEnvelopeReproducible", "conformance.TestItem5Seal"},
	},
	{
		Section:     "§7.6",
		Requirement: "maintain a tamper-evident hash chain (§6.3)",
		Status:      Covered,
		Tests:       []string{"node/receipt.TestVerifyLog", "node/steward.TestServeEndToEnd", "node/steward.TestServeConcurrent", "node/steward.TestResume", "conformance.TestItem6Chain"},
	},
	{
		Section:     "§7.7",
		Requirement: "where a backend has a change record, refuse its entries and serves as §6.5 sets out",
		Status:      Later,
		Tests:       []string{"node/steward.TestServeRefusals"},
		Note:        "The change record is a later issue. What exists: weights read before and after every serve, and a serve whose engine reports other weights (or none) is never sealed (§2).",
	},
	{
		Section:     "§3.1, §3.6",
		Requirement: "content-addressed request; decision optional and absent from the canonical form; decisions priced without max_tokens",
		Status:      Covered,
		Tests:       []string{"node/receipt.TestRequestCanonicalForm", "node/receipt.TestRequestIdentity", "node/receipt.TestRequestValidate", "node/receipt.TestDecodeRequest", "node/steward.TestRoute"},
	},
	{
		Section:     "§3.2.1",
		Requirement: "delivered above advertised is refused, never clamped; fidelity_met from delivered; advertised and delivered together or neither",
		Status:      Covered,
		Tests:       []string{"node/steward.TestServeFidelity", "node/steward.TestServeRefusals", "node/receipt.TestReceiptValidate", "node/receipt.TestDecodeCoreRefuses"},
	},
	{
		Section:     "§5",
		Requirement: "a deterministic, weights-free reference engine doing real work proportional to tokens; engines never report energy",
		Status:      Covered,
		Tests:       []string{"node/engine.TestReferenceAlgorithm", "node/engine.TestReferenceDeterminism", "node/engine.TestReferenceStops", "conformance.TestReferenceOutputRecomputable"},
	},
	{
		Section:     "§6.4",
		Requirement: "output commitment with a per-request opening from the steward key; disclosure; replay verdicts under the spec's conditions",
		Status:      Covered,
		Tests:       []string{"node/receipt.TestCommitmentFormulas", "node/receipt.TestOpeningAndDisclosure", "node/receipt.TestReplayVerdicts", "node/steward.TestReplay", "conformance.TestVectorReplays"},
	},
}
