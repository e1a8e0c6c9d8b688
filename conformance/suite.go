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
		Status:      Covered,
		Tests: []string{"node/steward/grant.TestVerifyRefusals", "node/steward/grant.TestDecideRefusals", "node/steward/grant.TestTwoPhases",
			"node/steward/grant.TestDecideOtherRequest", "node/steward/grant.TestVerifierMemory", "node/steward/grant.TestVectors",
			"node/steward.TestGrantedServe", "node/steward.TestGrantRefusalsAtSteward", "node/steward.TestGrantBreachOnReceipt", "node/steward.TestGrantedServesConcurrent",
			"node/steward.TestModelInRouting", "node/steward.TestNoJournalNoGrants", "node/steward.TestServeOrder", "conformance.TestItem1Grants"},
		Note: "Grants, chains and presentations are meshnode's reading of JCP (docs/grants.md). Presentation proofs are checked before routing so that ModelIn makes backends inadmissible; the decision (spent, expiry, revocation at the decision time, infer on the request, ModelIn, least left on any link ≥ ceiling) is journaled before the meter opens and holds the ceiling on every link; the metered joules are debited on every link after, with caveat-unsatisfied or budget-exhausted on the receipt.",
	},
	{
		Section:     "§7.2",
		Requirement: "journal each decision before its serve and each receipt before it is handed out; resume spend and chain from the journal",
		Status:      Covered,
		Tests: []string{"node/steward/journal.TestAppendReopen", "node/steward/journal.TestTornTail", "node/steward/journal.TestOpenRefuses",
			"node/steward/journal.TestAppendRefuses", "node/steward/journal.TestAppendFailureLatches", "node/steward/journal.TestLockInProcess",
			"node/steward/journal.TestLockSecondProcess", "node/steward.TestRestartReplay", "node/steward.TestReplayRefuses", "node/steward.TestWitness",
			"node/steward.TestJournalFailuresAtSteward", "node/steward.TestCrashKill", "node/steward.TestJournalFailureHoldsChain", "conformance.TestItem2Journal",
			"node/steward/journal.TestOpenSyncsDirectories", "node/steward/journal.TestShortWrite", "node/steward.TestEnginePanicIsDebited"},
		Note: "One JSON record per line, chained by BLAKE3 of the previous line, synced per append (and every directory Open creates synced before the first), flock held for the steward's life (refused where the platform has none). Replay re-decides every authorisation at its recorded time; unresolved serves stay held at their ceiling; a witnessed receipt the journal lacks is journaled and stops grants until the journal is restored. TestCrashKill SIGKILLs a real child steward at 220 points.",
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
			"node/steward.TestServeOrder", "node/steward.TestServeWithHWMeters", "node/steward.TestServeIncomplete", "node/steward.TestServeRefusals", "conformance.TestItem4Metering",
			"hw.TestCounterMeterWindowRule", "hw.TestCounterMeterFallsBackOnFaults", "hw.TestCounterMeterNeedsLiveSignal", "hw.TestProbeGrades", "hw/meters.TestChoose", "hw/meters.TestSelectedMeterWindow",
			"hw.TestProbeJudgesEachPart", "hw.TestCombinedPartFrozen", "hw.TestCounterMeterCoverage", "hw/meters.TestSelectFrozenGPUAfterProbe", "hw/meters.TestSelectCUDAWithoutNVML",
			"node/steward.TestServeGradedByBackendDevices",
			"hw.TestSharedSpansSumToTheMeter", "hw.TestSharedSpanGradeRules", "hw.TestLoneSpanAsBefore", "node/steward.TestBatchedServesSplitTheMeter", "node/steward.TestBatchedServesCeilings"},
		Note: "An Energy that breaks the coupling cannot be constructed (hw), a receipt can hold only an Energy, and every decoder rebuilds it through hw.NewEnergy. The meters grade the rest of §3.3: a span shorter than its counter's minimum window, or one whose readings fault, is billed by the estimator over its own length and graded Estimator (TestCounterMeterWindowRule, TestCounterMeterFallsBackOnFaults), and so is one over which the counter's liveness signal did not advance, since a counter live at start-up may freeze or its sensor stick later (TestCounterMeterNeedsLiveSignal); a counter is used only once seen advancing under load in 4 of every 5 intervals over at least 300 ms and 5 intervals (TestProbeGrades); and only live counters that together cover everything a request uses may grade HwShunt, never a partial one such as NVML alone on a host without a CPU counter (TestChoose, TestSelectedMeterWindow). Liveness is judged per part (each RAPL zone, each GPU), so a combined counter with one frozen part is neither live at start-up nor HwShunt later (TestProbeJudgesEachPart, TestCombinedPartFrozen, TestSelectFrozenGPUAfterProbe); and each serve is graded by the devices its engine says it runs on, so a serve on a device no chosen counter covers, such as CUDA where NVML is missing, is Estimator (TestCounterMeterCoverage, TestSelectCUDAWithoutNVML, TestServeGradedByBackendDevices). Serves batched together share each metered interval by the work each did, their receipts adding up to the counter's delta; a shared figure is a measurement apportioned by a rule, so ModelBased, and only under the rules a lone serve needs for HwShunt, judged per serve; a serve alone is graded as before (TestSharedSpansSumToTheMeter, TestSharedSpanGradeRules, TestLoneSpanAsBefore, TestBatchedServesSplitTheMeter, TestBatchedServesCeilings).",
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
		Status:      Covered,
		Tests: []string{"node/steward/change.TestAppendRefuses", "node/steward/change.TestGate", "node/steward/change.TestCoverage",
			"node/steward/change.TestSealOpenVerify", "node/steward/change.TestEntryKeys", "node/steward.TestChangeRecordGate",
			"node/steward.TestServeRefusals", "conformance.TestItem7ChangeRecord"},
		Note: "Entries are sealed under the steward key and journaled; the gate makes a backend whose engine names other weights inadmissible before any grant is decided, and refuses to seal a serve whose engine reports other weights; a restart re-verifies the record. The gate applies once a record has a weights entry (a plan alone puts no weights in effect).",
	},
	{
		Section:     "§2.3",
		Requirement: "grants over the OpenAI binding: jcp_presentation, granted_serve_request, metadata.joule_ceiling_uj required, 401/403/503",
		Status:      Covered,
		Tests: []string{"node/steward/grant.TestGrantedServeRequest", "node/steward/grant.TestGrantedServeRequestRefuses",
			"node/steward/grant.TestPresentBody", "node/steward/grant.TestHTTPStatus", "node.TestGrantedServeAndRestart", "node.TestGrantedRefusals", "node/api.TestNodeEndpoints"},
		Note: "The derivation, the body's presentation and the status mapping are grant.GrantedServeRequest, grant.BodyPresentation and grant.HTTPStatus; the node's generate handler serves a body with jcp_presentation as exactly the request the binding derives, and TestGrantedServeAndRestart proves it end to end over HTTP (served and debited, 403 when spent again, 400 without metadata.joule_ceiling_uj, spend and chain kept across a restart). TestGrantedRefusals drives the rest through a whole node: 401 for a presentation whose caller is not its issuer or whose body was changed (nothing spent), and 503 for grants after /v1/mesh/witness answered 409, while ungranted requests are still served. The mapping itself is TestHTTPStatus.",
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
		Tests:       []string{"node/receipt.TestCommitmentFormulas", "node/receipt.TestOpeningAndDisclosure", "node/receipt.TestReplayVerdicts", "node/steward.TestReplay", "conformance.TestVectorReplays", "conformance.TestVectorsVerify"},
	},
}
