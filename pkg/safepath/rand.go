package safepath

import "crypto/rand"

var randReader = rand.Reader
