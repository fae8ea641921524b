package harness

// InNetNamespace is inNetNamespace, for the tests that dial the harness's
// servers from an agent's network.
var InNetNamespace = inNetNamespace
