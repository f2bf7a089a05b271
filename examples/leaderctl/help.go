package main

// connectionHelp describes the flags every command takes.
const connectionHelp = `Storage account, exactly one of (a flag overrides the environment):
  -connection-string S  storage connection string
                        (env AZURE_STORAGE_CONNECTION_STRING)
  -account-url URL      blob service URL, e.g. https://myaccount.blob.core.windows.net/,
                        signed in with DefaultAzureCredential: environment, workload or
                        managed identity, Azure CLI... (env AZURE_STORAGE_ACCOUNT_URL)
  -sas-url URL          the account's or the container's URL with a SAS token
                        (env AZURE_STORAGE_SAS_URL)

Lease, both required: there are no defaults, so that break never acts on a
lease you did not name:
  -container NAME       container of the lease blob (env LEASE_CONTAINER)
  -blob NAME            the lease blob (env LEASE_BLOB)

  -timeout D            give up after D (default 10s)
`

const mainHelp = `leaderctl shows and breaks the lease of a leaderelection group.

Usage:
  leaderctl status [flags]   who leads, since when, and the lease's state
  leaderctl break [flags]    make the leader stop, so that another instance can lead
  leaderctl help [command]

` + connectionHelp + `
Exit status: 0 done, 1 a storage request failed, 2 usage error (nothing sent).
`

const statusHelp = `Usage: leaderctl status [flags]

Shows who leads (the identity and term the leader recorded in the blob), since
when (UTC, and how long ago), and the lease's state, status and duration. When
nobody holds the lease it says "no leader" and shows the last leader, if any.
Reading needs no lease and disturbs nobody.

  -json                 print one JSON object instead:
                        {"container", "blob", "exists", "held", "state", "status",
                         "duration", "leader": null or {"identity", "term", "since",
                         "ageSeconds"}, "lastLeader": the same, when nobody leads}

` + connectionHelp

const breakHelp = `Usage: leaderctl break [flags]

Breaks the lease: the leader's next renewal fails, its leader func is
cancelled, and once the break period has passed any instance can take the
lease. It shows who held the lease before breaking it. The deposed leader
lets the free lease pass once, so a waiting instance takes over; alone, it
leads again. A lease nobody holds is left alone.

  -period D             the break period, whole seconds from 0s to 60s. Default:
                        the safe break period, the holders' LeaseDuration
                        (15s with the library's defaults). A connected leader
                        stops at its next renewal whatever the period; one cut
                        off from storage never learns of the break and acts
                        until its own safety deadline, which a break this long
                        never precedes. Give a shorter one only if the holder
                        is known to be dead: otherwise another instance may
                        lead while the old leader still acts.
  -lease-duration D     the holders' BlobSettings.LeaseDuration, if it is not
                        the library's default 15s; it only sets the default
                        -period

` + connectionHelp
