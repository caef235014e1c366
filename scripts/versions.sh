# The PostgreSQL majors snowflake_id is built and tested on, read by
# setup.sh and test.sh. 15 is Debian 12's own; the others are built from
# Debian's source packages by postgres-builds.sh (14 and 16 have none there;
# 13 is end-of-life but cheap to keep).
SYSTEM_MAJOR=15
OTHER_MAJORS="${SNOWFLAKE_OTHER_MAJORS-13 17 18}"
# The newest: it gets every real-server test, as the system's does.
NEWEST_MAJOR=18
PG_CACHE="${SNOWFLAKE_PG_CACHE:-/var/cache/snowflake_id/postgres}"
