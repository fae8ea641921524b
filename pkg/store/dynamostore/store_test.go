package dynamostore_test

import (
	"testing"

	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/storetest"
)

func TestConformance(t *testing.T) {
	c := client(t)
	storetest.Run(t, func(t *testing.T) store.Store { return newTable(t, c) })
}
