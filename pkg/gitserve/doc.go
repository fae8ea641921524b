// Package gitserve is git's smart HTTP protocol as small http.Handlers that
// compose: Backend serves a bare repository (git http-backend through
// net/http/cgi), BasicAuth puts a credential in front of anything, Upstream
// forwards to a remote repository adding the house git credential, and
// PushGate reads each push's ref updates and refuses, before anything
// reaches the next handler, those its RefPolicy does not allow.
//
// Two compositions are meant:
//
//   - aws-local's house repository, served the way a forge serves it
//     (a wrong credential fails):
//     BasicAuth(realm, Credential(user, token), Backend(repoDir))
//   - a worker's push gate, run by the harness on loopback for its agent,
//     which holds only a per-session secret and never the house credential:
//     BasicAuth(realm, Credential(user, sessionSecret),
//     BudgetedPushGate(OnlyBranch(branch), NewBudget(perPush, total),
//     Upstream(houseURL, user, token), options...)); the gate bounds what
//     it holds for the agent at once (pushes and requests in flight, their
//     bodies' time and size, its spools' disk: GateOption, Budget)
//
// The handlers look only at the end of the URL path (/info/refs,
// /git-upload-pack, /git-receive-pack), so they can be mounted anywhere and
// the repository's name in the URL means nothing. Dumb-HTTP paths are not
// served. A push is one POST to /git-receive-pack in protocol v0/v1 (git
// has no v2 push), which is what PushGate parses; fetches, in any protocol
// version, pass untouched.
//
// No credential appears in an error, a response body or a log line: the
// client's Authorization header stops at BasicAuth, and Upstream's token is
// set on the outgoing request only.
package gitserve
