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

func TestEvents(t *testing.T) {
	c := client(t)
	storetest.RunEvents(t, func(t *testing.T) storetest.EventStore { return newTable(t, c) })
}
