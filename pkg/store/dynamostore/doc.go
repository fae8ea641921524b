// Package dynamostore keeps galley's records (package store) in one
// DynamoDB table. Every rule the store contract states is a condition inside
// the write that could break it: a versioned put is an UpdateItem conditioned
// on the version the writer read, and an append is one TransactWriteItems
// that moves the sequence counter (conditioned on the value observed) and
// puts the message (conditioned on its absence) together, so a message is
// visible only with every earlier one.
//
// A write whose answer was lost (a timeout, a reset connection, a 5xx) is
// retried unchanged and then resolved from the item itself: each write
// carries a random write id, so finding our id at the version we asked for
// proves the write happened, and a different writer there proves it did not.
// Only when neither can be proved does a call answer Unavailable.
//
// docs/storage.md gives the table design, the item types, every condition
// and the invariant it protects.
package dynamostore
