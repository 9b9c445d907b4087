"""Alert mails as periodic jobs: a wallet's balance under its low-balance threshold (once per
crossing), a project's or key's month-to-date spend past 80 % and 100 % of its monthly budget
(once per threshold and month). Each goes to the tenant's admins and billing members with a
verified address, through the outbox (mail/). May import store, mail, jobs, limits (the
month's spend) and settings; never admin, console or gateway."""
