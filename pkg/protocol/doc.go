// Package protocol holds the wire types of the HTTP worker protocol that
// kitchn speaks, their strict validation against every limit the client
// enforces, and the exact encodings of the answers the client reads. It knows
// nothing of storage, workers or HTTP routing.
package protocol
