// Command nightly-report runs a job under a schedlock lock: on every node at the same time, only one does the work.
//
//	SCHEDLOCK_URL=http://schedlock:8000 SCHEDLOCK_TOKEN=... go run ./cmd/nightly-report
//
// It exits 0 when the job ran or another node held the lock, 69 when the lock service was unavailable (the job
// did not run), 1 when the job or the request failed.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"example.com/schedlock"
)

func main() {
	ran, err := schedlock.Run(context.Background(), "nightly-report", 14*time.Minute, 5*time.Minute, sendReport)
	switch {
	case errors.Is(err, schedlock.ErrUnavailable):
		log.Printf("not run, the lock service is unavailable: %v", err)
		os.Exit(69)
	case err != nil:
		log.Fatal(err)
	case !ran:
		fmt.Println("skipped: another node holds nightly-report")
	}
}

func sendReport(ctx context.Context) error {
	lease, err := schedlock.AssertLocked(ctx)
	if err != nil {
		return err
	}
	fmt.Println("sending the report, fencing token", lease.FencingToken)
	return nil
}
