// Package conformance is galley's own conformance suite for the HTTP worker
// protocol: named checks that call a live endpoint exactly the way kitchn's
// client does (one request per call, no redirects, at most 1 MiB read, a
// deadline per call) and read every answer with the client's strict parsers
// from package protocol. Operators run it through `galley conformance`
// before binding kitchn to a deployment; Go tests run it in-process with Run.
//
// Checks marked as performing effects launch, message, cancel and release
// real workers (and create branches named galley-conformance/<random>, which
// releases never delete). Every worker the suite launches and does not see
// settle is cancelled when the run ends.
package conformance
