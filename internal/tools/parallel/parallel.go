// Package parallel runs a func over items a bounded number at a time, for
// the bench commands' floors.
package parallel

import "sync"

// Each runs fn on every item, at most n at a time, and returns the first
// error.
func Each[T any](items []T, n int, fn func(T) error) error {
	sem := make(chan struct{}, n)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, it := range items {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(it); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}
