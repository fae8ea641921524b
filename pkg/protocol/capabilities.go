package protocol

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
