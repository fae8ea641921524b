// Package store defines the records galley keeps (effect claims, resources
// with their workers, mailbox heads and messages, worker inboxes, the
// operator console's sessions and the tallies that throttle its logins) and the
// contract every store implementation meets. Records are versioned: every
// change is a conditional write against the version the writer read, so an
// invariant that a read-modify-write protects holds under any concurrency.
// Implementations live in subpackages (memstore, boltstore, dynamostore)
// and all pass storetest.
package store
