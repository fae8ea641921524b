package protocol

import (
	"slices"
	"strconv"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// Capability names the protocol lists.
const (
	CapLaunchIsolated     = "worker.launch_isolated"
	CapLaunchReadiness    = "worker.launch_readiness"
	CapStatusAndOutcome   = "worker.status_and_outcome"
	CapMessaging          = "worker.messaging"
	CapCancel             = "worker.cancel"
	CapDeliveries         = "worker.deliveries"
	CapRunTransfer        = "run.transfer"
	CapInventory          = "resource.inventory"
	CapRelease            = "resource.release"
	CapUsageAttribution   = "usage.attribution"
	CapEffectLookup       = "effect.lookup"
	CapIdempotentRequests = "effect.idempotent_requests"
	CapHouseCredentials   = "house.credentials"
)

// LookupCapability and IdempotentCapability name the per-operation forms
// effect.lookup.<op> and effect.idempotent.<op>.
func LookupCapability(op string) string     { return "effect.lookup." + op }
func IdempotentCapability(op string) string { return "effect.idempotent." + op }

// Capabilities lists every capability name the protocol lists, in a fixed
// order. An unsupported answer may name only one of these: the client reads
// any other name as an unreadable answer.
var Capabilities = func() []string {
	caps := []string{
		CapLaunchIsolated, CapLaunchReadiness, CapStatusAndOutcome, CapMessaging,
		CapCancel, CapDeliveries, CapRunTransfer, CapInventory, CapRelease,
		CapUsageAttribution, CapEffectLookup, CapIdempotentRequests, CapHouseCredentials,
	}
	for _, op := range []string{OpLaunch, OpMessage, OpReply, OpCancel, OpRelease} {
		caps = append(caps, LookupCapability(op), IdempotentCapability(op))
	}
	return caps
}()

var capabilitySet = func() map[string]bool {
	m := make(map[string]bool, len(Capabilities))
	for _, c := range Capabilities {
		m[c] = true
	}
	return m
}()

// IsCapability reports whether name is in Capabilities.
func IsCapability(name string) bool { return capabilitySet[name] }

// OpCapability names the capability a worker effect type needs, for an
// unsupported answer about a known type.
func OpCapability(op string) (string, bool) {
	switch op {
	case OpLaunch:
		return CapLaunchIsolated, true
	case OpMessage, OpReply:
		return CapMessaging, true
	case OpCancel:
		return CapCancel, true
	case OpRelease:
		return CapRelease, true
	}
	return "", false
}

// NotApplied is a not-applied outcome with reason, one of the five reasons.
func NotApplied(reason string) EffectOutcome {
	return EffectOutcome{Status: StatusNotApplied, Reason: reason}
}

// RateLimited is a rate-limited outcome; a retryAfter of 0 or less sends no
// hint.
func RateLimited(retryAfter int) EffectOutcome {
	o := NotApplied(ReasonRateLimited)
	if retryAfter > 0 {
		o.RetryAfterSeconds = retryAfter
	}
	return o
}

// UnsupportedOutcome is an unsupported outcome naming capability. A name
// that is not a real capability is left out, since the client would read
// the whole answer as unreadable (and the outcome as uncertain).
func UnsupportedOutcome(capability string) EffectOutcome {
	o := NotApplied(ReasonUnsupported)
	if IsCapability(capability) {
		o.Capability = capability
	}
	return o
}

// Applied is an applied outcome with its receipt.
func Applied(r Receipt) EffectOutcome {
	return EffectOutcome{Status: StatusApplied, Receipt: &r}
}

// Encoders: galley sends every answer through them (package api), and
// every receipt it stores. Each one refuses a value the client would not
// read, with an error of kind Other: such a value is galley's own bug, and
// an uncertain 500 is the only safe answer to it (never a not-applied,
// which would be a promise). Their output is compact, in a fixed field
// order, with arrays never null, so that one value always encodes to the
// same bytes.

// internal turns a validation error into an encoder error of kind Other,
// keeping its message but not its kind.
func internal(what string, err error) error {
	msg := err.Error()
	if e := galleyerr.As(err); e != nil {
		msg = e.Msg
	}
	return &galleyerr.Error{Kind: galleyerr.Other, Msg: "protocol: cannot encode " + what + ": " + msg}
}

func (r Receipt) validate(path string) error {
	if !IsReference(r.Reference) {
		return invalidf(path+".reference", msgReference)
	}
	if n := len(r.Created) + len(r.Touched); n > MaxReceiptResources {
		return invalidf(path, "names "+strconv.Itoa(n)+" resources, more than 16")
	}
	for i, res := range r.Created {
		if err := res.validate(path + ".created[" + strconv.Itoa(i) + "]"); err != nil {
			return err
		}
	}
	for i, res := range r.Touched {
		if err := res.validate(path + ".touched[" + strconv.Itoa(i) + "]"); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks that r is a receipt the client reads: a reference, at
// most 16 resources, each well-formed and in backend.
func (r Receipt) Validate(backend string) error {
	if err := r.validate("receipt"); err != nil {
		return err
	}
	for i, res := range r.Created {
		if res.Backend != backend {
			return invalidf("receipt.created["+strconv.Itoa(i)+"].backend", "must be the service's backend")
		}
	}
	for i, res := range r.Touched {
		if res.Backend != backend {
			return invalidf("receipt.touched["+strconv.Itoa(i)+"].backend", "must be the service's backend")
		}
	}
	return nil
}

// ValidateFor checks the rules the client adds for e's receipt: a launch
// creates exactly one worker and, with a branch, exactly one branch resource,
// in created, whose handle is that branch; a release of anything but a
// branch names no branch.
func (r Receipt) ValidateFor(e WorkerEffect) error {
	count := func(list []Resource, kind string) int {
		n := 0
		for _, res := range list {
			if res.Kind == kind {
				n++
			}
		}
		return n
	}
	switch e.Type {
	case OpLaunch:
		if count(r.Created, KindWorker) != 1 {
			return invalidf("receipt.created", "must hold exactly one worker")
		}
		if e.Branch != nil {
			if count(r.Created, KindBranch) != 1 || count(r.Touched, KindBranch) != 0 {
				return invalidf("receipt", "must name exactly one branch, in created")
			}
			for _, res := range r.Created {
				if res.Kind == KindBranch && res.Handle != *e.Branch {
					return invalidf("receipt.created", "branch handle must be the requested branch")
				}
			}
		}
	case OpRelease:
		if e.Resource != nil && e.Resource.Kind != KindBranch &&
			count(r.Created, KindBranch)+count(r.Touched, KindBranch) != 0 {
			return invalidf("receipt", "a release must not name a branch")
		}
	}
	return nil
}

func appendResource(b []byte, r Resource) []byte {
	b = append(b, `{"kind":`...)
	b = appendString(b, r.Kind)
	b = append(b, `,"backend":`...)
	b = appendString(b, r.Backend)
	b = append(b, `,"handle":`...)
	b = appendString(b, r.Handle)
	return append(b, '}')
}

func appendResources(b []byte, rs []Resource) []byte {
	b = append(b, '[')
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendResource(b, r)
	}
	return append(b, ']')
}

func appendReceipt(b []byte, r Receipt) []byte {
	b = append(b, `{"reference":`...)
	b = appendString(b, r.Reference)
	b = append(b, `,"created":`...)
	b = appendResources(b, r.Created)
	b = append(b, `,"touched":`...)
	b = appendResources(b, r.Touched)
	return append(b, '}')
}

// EncodeReceipt encodes r as {"reference","created","touched"}, with nil
// lists as []. It refuses more than 16 resources or a malformed one.
func EncodeReceipt(r Receipt) ([]byte, error) {
	if err := r.validate("receipt"); err != nil {
		return nil, internal("receipt", err)
	}
	return appendReceipt(nil, r), nil
}

func validOutcome(o EffectOutcome) error {
	switch o.Status {
	case StatusApplied:
		if o.Receipt == nil {
			return invalidf("receipt", "missing")
		}
		if o.Reason != "" || o.RetryAfterSeconds != 0 || o.Capability != "" {
			return invalidf("status", "applied carries only a receipt")
		}
		return o.Receipt.validate("receipt")
	case StatusNotApplied:
		switch {
		case o.Receipt != nil:
			return invalidf("receipt", "not allowed when not applied")
		case !IsReason(o.Reason):
			return invalidf("reason", "must be rejected, rate-limited, unsupported, cross-house or foreign-backend")
		case o.RetryAfterSeconds < 0 || o.RetryAfterSeconds != 0 && o.Reason != ReasonRateLimited:
			return invalidf("retryAfterSeconds", "only a positive hint on rate-limited")
		case o.Capability != "" && (o.Reason != ReasonUnsupported || !IsCapability(o.Capability)):
			return invalidf("capability", "only a real capability name on unsupported")
		}
		return nil
	}
	return invalidf("status", "must be applied or not-applied")
}

// EncodeEffectOutcome encodes the answer of POST /v1/effects. It does not
// know the service's backend: check the receipt with Receipt.Validate too.
func EncodeEffectOutcome(o EffectOutcome) ([]byte, error) {
	if err := validOutcome(o); err != nil {
		return nil, internal("effect outcome", err)
	}
	b := append([]byte(`{"status":`), appendString(nil, o.Status)...)
	if o.Status == StatusApplied {
		b = append(b, `,"receipt":`...)
		b = appendReceipt(b, *o.Receipt)
		return append(b, '}'), nil
	}
	b = append(b, `,"reason":`...)
	b = appendString(b, o.Reason)
	if o.RetryAfterSeconds > 0 {
		b = append(b, `,"retryAfterSeconds":`...)
		b = strconv.AppendInt(b, int64(o.RetryAfterSeconds), 10)
	}
	if o.Capability != "" {
		b = append(b, `,"capability":`...)
		b = appendString(b, o.Capability)
	}
	return append(b, '}'), nil
}

// EncodeLookupAnswer encodes applied (with its receipt), absent or unknown.
func EncodeLookupAnswer(a LookupAnswer) ([]byte, error) {
	switch a.Status {
	case StatusApplied:
		if a.Receipt == nil {
			return nil, internal("lookup answer", invalidf("receipt", "missing"))
		}
		if err := a.Receipt.validate("receipt"); err != nil {
			return nil, internal("lookup answer", err)
		}
		b := append([]byte(`{"status":"applied","receipt":`), appendReceipt(nil, *a.Receipt)...)
		return append(b, '}'), nil
	case StatusAbsent, StatusUnknown:
		if a.Receipt != nil {
			return nil, internal("lookup answer", invalidf("receipt", "only on applied"))
		}
		return append(appendString([]byte(`{"status":`), a.Status), '}'), nil
	}
	return nil, internal("lookup answer", invalidf("status", "must be applied, absent or unknown"))
}

// IsState reports whether s is one of the seven worker states.
func IsState(s string) bool {
	switch s {
	case StateStarting, StateReady, StateAwaitingReply, StateUserTakeover,
		StateSettled, StateMissing, StateUnknown:
		return true
	}
	return false
}

// EncodeObservation encodes {"state"} with "outcome" exactly when settled.
func EncodeObservation(o Observation) ([]byte, error) {
	switch {
	case !IsState(o.State):
		return nil, internal("observation", invalidf("state", "must be a worker state"))
	case o.State == StateSettled && !IsOutcome(o.Outcome):
		return nil, internal("observation", invalidf("outcome", "must be succeeded, failed or cancelled when settled"))
	case o.State != StateSettled && o.Outcome != "":
		return nil, internal("observation", invalidf("outcome", "only when settled"))
	}
	b := appendString([]byte(`{"state":`), o.State)
	if o.Outcome != "" {
		b = append(b, `,"outcome":`...)
		b = appendString(b, o.Outcome)
	}
	return append(b, '}'), nil
}

func isLiveness(s string) bool {
	return s == LivenessLive || s == LivenessExited || s == LivenessUnverifiable
}

// EncodeInventory encodes at most 1024 rows of exactly
// {"resource","owner","liveness"}, owner null when unknown.
func EncodeInventory(inv Inventory) ([]byte, error) {
	if len(inv.Resources) > MaxInventoryRows {
		return nil, internal("inventory", invalidf("resources", "more than 1024 rows"))
	}
	b := []byte(`{"resources":[`)
	for i, row := range inv.Resources {
		p := "resources[" + strconv.Itoa(i) + "]"
		if err := row.Resource.validate(p + ".resource"); err != nil {
			return nil, internal("inventory", err)
		}
		if row.Owner != nil && !IsReference(*row.Owner) {
			return nil, internal("inventory", invalidf(p+".owner", msgReference))
		}
		if !isLiveness(row.Liveness) {
			return nil, internal("inventory", invalidf(p+".liveness", "must be live, exited or unverifiable"))
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"resource":`...)
		b = appendResource(b, row.Resource)
		b = append(b, `,"owner":`...)
		if row.Owner == nil {
			b = append(b, "null"...)
		} else {
			b = appendString(b, *row.Owner)
		}
		b = append(b, `,"liveness":`...)
		b = appendString(b, row.Liveness)
		b = append(b, '}')
	}
	return append(b, "]}"...), nil
}

// ValidUsageReport checks a usage report the client accepts: a reference
// source; agent, when known, claude or codex; a model name; token counts and
// a cost amount that are not negative; a cost basis of reported or computed;
// and something besides the source. Its errors are Invalid.
func ValidUsageReport(r UsageReport) error {
	if !IsReference(r.Source) {
		return invalidf("report.source", msgReference)
	}
	if r.Agent != "" && !IsAgentFamily(r.Agent) {
		return invalidf("report.agent", "must be claude or codex, or left out")
	}
	if r.Model != "" && !IsModel(r.Model) {
		return invalidf("report.model", msgModel)
	}
	if t := r.Tokens; t != nil {
		counts := [...]struct {
			name string
			n    *int64
		}{{"input", t.Input}, {"output", t.Output}, {"cacheRead", t.CacheRead}, {"cacheWrite", t.CacheWrite}}
		counted := false
		for _, c := range counts {
			if c.n != nil {
				counted = true
				if *c.n < 0 {
					return invalidf("report.tokens."+c.name, "must not be negative")
				}
			}
		}
		if !counted {
			return invalidf("report.tokens", "must hold a count, or be left out")
		}
	}
	if c := r.Cost; c != nil {
		if c.Amount < 0 {
			return invalidf("report.cost.amount", "must not be negative")
		}
		if c.Basis != BasisReported && c.Basis != BasisComputed {
			return invalidf("report.cost.basis", "must be reported or computed")
		}
	}
	if r.Agent == "" && r.Model == "" && r.Tokens == nil && r.Cost == nil {
		return invalidf("report", "holds nothing but its source")
	}
	return nil
}

func appendCount(b []byte, first bool, name string, n *int64) ([]byte, bool) {
	if n == nil {
		return b, first
	}
	if !first {
		b = append(b, ',')
	}
	b = appendString(b, name)
	b = append(b, ':')
	return strconv.AppendInt(b, *n, 10), false
}

// EncodeUsageAnswer encodes {"status":"none"} or a reported usage, leaving
// out what is unknown.
func EncodeUsageAnswer(u UsageAnswer) ([]byte, error) {
	switch u.Status {
	case UsageNone:
		if u.Report != nil {
			return nil, internal("usage answer", invalidf("report", "only when reported"))
		}
		return []byte(`{"status":"none"}`), nil
	case UsageReported:
	default:
		return nil, internal("usage answer", invalidf("status", "must be none or reported"))
	}
	if u.Report == nil {
		return nil, internal("usage answer", invalidf("report", "missing"))
	}
	r := *u.Report
	if err := ValidUsageReport(r); err != nil {
		return nil, internal("usage answer", err)
	}
	b := append([]byte(`{"status":"reported","report":{"source":`), appendString(nil, r.Source)...)
	if r.Agent != "" {
		b = appendString(append(b, `,"agent":`...), r.Agent)
	}
	if r.Model != "" {
		b = appendString(append(b, `,"model":`...), r.Model)
	}
	if t := r.Tokens; t != nil {
		b = append(b, `,"tokens":{`...)
		first := true
		b, first = appendCount(b, first, "input", t.Input)
		b, first = appendCount(b, first, "output", t.Output)
		b, first = appendCount(b, first, "cacheRead", t.CacheRead)
		b, _ = appendCount(b, first, "cacheWrite", t.CacheWrite)
		b = append(b, '}')
	}
	if c := r.Cost; c != nil {
		b = strconv.AppendInt(append(b, `,"cost":{"amount":`...), c.Amount, 10)
		b = append(appendString(append(b, `,"basis":`...), c.Basis), '}')
	}
	return append(b, "}}"...), nil
}

// validMessage checks one mailbox row as galley sends it: a known kind, the
// worker always, an outcome only (and optionally) on worker-done.
func validMessage(path string, m MailMessage, knownKind bool) error {
	switch {
	case !IsReference(m.ID):
		return invalidf(path+".id", msgReference)
	case knownKind && !IsMessageKind(m.Kind):
		return invalidf(path+".kind", "must be question, worker-done, escalation, heartbeat or status")
	case !knownKind && !isTextN(m.Kind, MaxReferenceLen):
		return invalidf(path+".kind", "must be a short text")
	case m.Worker == nil:
		return invalidf(path+".worker", "missing")
	case m.Outcome != "" && m.Kind != MsgWorkerDone:
		return invalidf(path+".outcome", "only on worker-done")
	case m.Outcome != "" && !IsOutcome(m.Outcome):
		return invalidf(path+".outcome", "must be succeeded, failed or cancelled")
	case m.Subject != "" && !IsText(m.Subject):
		return invalidf(path+".subject", msgText)
	case m.Body != "" && !IsText(m.Body):
		return invalidf(path+".body", msgText)
	}
	if err := m.Worker.validate(path + ".worker"); err != nil {
		return err
	}
	if m.Worker.Kind != KindWorker {
		return invalidf(path+".worker.kind", "must be worker")
	}
	return nil
}

// EncodeMailboxAnswer encodes empty, fenced, or a delivery with its
// messages (never null) and unreadable count.
func EncodeMailboxAnswer(a MailboxAnswer) ([]byte, error) {
	switch a.Status {
	case MailEmpty, MailFenced:
		if a.Delivery != nil {
			return nil, internal("mailbox answer", invalidf("delivery", "only on delivery"))
		}
		return append(appendString([]byte(`{"status":`), a.Status), '}'), nil
	case MailDelivery:
	default:
		return nil, internal("mailbox answer", invalidf("status", "must be empty, fenced or delivery"))
	}
	d := a.Delivery
	switch {
	case d == nil:
		return nil, internal("mailbox answer", invalidf("delivery", "missing"))
	case !IsReference(d.ID):
		return nil, internal("mailbox answer", invalidf("delivery.id", msgReference))
	case d.Unreadable < 0:
		return nil, internal("mailbox answer", invalidf("delivery.unreadable", "must not be negative"))
	}
	b := append([]byte(`{"status":"delivery","delivery":{"id":`), appendString(nil, d.ID)...)
	b = append(b, `,"messages":[`...)
	for i, m := range d.Messages {
		if err := validMessage("delivery.messages["+strconv.Itoa(i)+"]", m, true); err != nil {
			return nil, internal("mailbox answer", err)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendMessage(b, m)
	}
	b = strconv.AppendInt(append(b, `],"unreadable":`...), int64(d.Unreadable), 10)
	return append(b, "}}"...), nil
}

func appendMessage(b []byte, m MailMessage) []byte {
	b = appendString(append(b, `{"id":`...), m.ID)
	b = appendString(append(b, `,"kind":`...), m.Kind)
	b = appendResource(append(b, `,"worker":`...), *m.Worker)
	if m.Outcome != "" {
		b = appendString(append(b, `,"outcome":`...), m.Outcome)
	}
	if m.Subject != "" {
		b = appendString(append(b, `,"subject":`...), m.Subject)
	}
	if m.Body != "" {
		b = appendString(append(b, `,"body":`...), m.Body)
	}
	return append(b, '}')
}

// EncodeAdoptAnswer encodes the only two answers of runs/adopt: {} when the
// caller is (now) the run's reader, {"status":"fenced"} otherwise.
func EncodeAdoptAnswer(fenced bool) []byte {
	if fenced {
		return []byte(`{"status":"fenced"}`)
	}
	return []byte(`{}`)
}

// EncodeDescriptor encodes the descriptor with its capabilities in sorted
// order. Every support value must be supported or partial: any other makes
// the whole descriptor unreadable.
func EncodeDescriptor(d Descriptor) ([]byte, error) {
	if err := validDescriptor(d); err != nil {
		return nil, internal("descriptor", err)
	}
	b := appendString([]byte(`{"backend":`), d.Backend)
	b = appendString(append(b, `,"house":`...), d.House)
	b = append(b, `,"capabilities":{`...)
	names := make([]string, 0, len(d.Capabilities))
	for name := range d.Capabilities {
		names = append(names, name)
	}
	slices.Sort(names)
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(appendString(b, name), ':')
		b = appendString(b, d.Capabilities[name])
	}
	b = append(b, '}')
	if ws := d.WorkerSelection; ws != nil {
		b = append(b, `,"workerSelection":{"families":[`...)
		for i, f := range ws.Families {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, f)
		}
		b = strconv.AppendBool(append(b, `],"model":`...), ws.Model)
		b = append(appendString(append(b, `,"effort":`...), ws.Effort), '}')
	}
	return append(b, '}'), nil
}

func isEffortMode(s string) bool {
	return s == EffortUnsupported || s == EffortWithModel || s == EffortAlways
}

func validDescriptor(d Descriptor) error {
	switch {
	case !IsIdentifier(d.Backend):
		return invalidf("backend", msgIdentifier)
	case !IsIdentifier(d.House):
		return invalidf("house", msgIdentifier)
	}
	for name, support := range d.Capabilities {
		if !isTextN(name, MaxReferenceLen) {
			return invalidf("capabilities", "names must be short text")
		}
		if support != SupportSupported && support != SupportPartial {
			return invalidf("capabilities", "every value must be supported or partial")
		}
	}
	if ws := d.WorkerSelection; ws != nil {
		for _, f := range ws.Families {
			if !isTextN(f, MaxReferenceLen) {
				return invalidf("workerSelection.families", "must be short texts")
			}
		}
		if !isEffortMode(ws.Effort) {
			return invalidf("workerSelection.effort", "must be unsupported, with-model or always")
		}
	}
	return nil
}
