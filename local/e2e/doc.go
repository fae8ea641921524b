// Package e2e tests galley end to end: the real galley and galley-worker
// binaries, started as processes on loopback, driven over HTTP the way
// kitchn drives them.
package e2e
