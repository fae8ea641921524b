// Package api serves galley over HTTP: the /v1/ routes kitchn calls, behind
// bearer-token authentication, and the /worker/v1/ routes a worker's
// harness calls with its own credential. It decodes and bounds requests,
// calls the service, and maps every error kind to the answer the client
// expects in one place (answers.go). The same handler runs behind
// net/http locally and behind API Gateway on Lambda.
package api
