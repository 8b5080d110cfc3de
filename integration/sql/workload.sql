-- Sluice recorded workload (MariaDB 10.11). Run by integration/record_workload.sh through
-- integration/record_workload.py, one statement at a time, so that the state after every committed
-- transaction can be snapshotted.
--
-- Syntax the runner understands: one statement ends with ';' at the end of a line; lines starting with
-- '--' are comments; the directive '-- @reconnect' closes the client connection and opens a new one (needed
-- after SET GLOBAL log_bin_compress, which only applies to sessions opened afterwards).
-- Keep it deterministic: fixed data, fixed SET TIMESTAMP, no RAND()/NOW() without a fixed timestamp.

SET SESSION time_zone = '+00:00';
SET TIMESTAMP = 1700000000;
CREATE DATABASE sluice_it CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci;
USE sluice_it;

-- ---------------------------------------------------------------- every column type
CREATE TABLE t_types (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  ti TINYINT NULL, tiu TINYINT UNSIGNED NULL,
  si SMALLINT NULL, siu SMALLINT UNSIGNED NULL,
  mi MEDIUMINT NULL, miu MEDIUMINT UNSIGNED NULL,
  i INT NULL, iu INT UNSIGNED NULL,
  bi BIGINT NULL, biu BIGINT UNSIGNED NULL,
  dec65 DECIMAL(65,30) NULL, dec10 DECIMAL(10,2) NULL, dec0 DECIMAL(20,0) NULL,
  f FLOAT NULL, d DOUBLE NULL,
  dt DATE NULL,
  tm0 TIME NULL, tm3 TIME(3) NULL, tm6 TIME(6) NULL,
  dtm0 DATETIME NULL, dtm2 DATETIME(2) NULL, dtm6 DATETIME(6) NULL,
  ts0 TIMESTAMP NULL DEFAULT NULL, ts6 TIMESTAMP(6) NULL DEFAULT NULL,
  yr YEAR NULL,
  c CHAR(10) CHARACTER SET utf8mb4 NULL,
  vc VARCHAR(300) CHARACTER SET utf8mb4 NULL,
  txt TEXT CHARACTER SET utf8mb4 NULL,
  vlat VARCHAR(20) CHARACTER SET latin1 NULL,
  bin8 BINARY(8) NULL, vbin VARBINARY(64) NULL,
  tblb TINYBLOB NULL, blb BLOB NULL, mblb MEDIUMBLOB NULL, lblb LONGBLOB NULL,
  e ENUM('small','medium','large') NULL, st SET('red','green','blue') NULL,
  b1 BIT(1) NULL, b3 BIT(3) NULL, b64 BIT(64) NULL,
  j JSON NULL,
  g GEOMETRY NULL, pt POINT NULL,
  uid UUID NULL, ip INET6 NULL
) ENGINE=InnoDB;

-- row 1: typical values, emoji + CJK, latin1, binary with trailing zero bytes, SRID
INSERT INTO t_types VALUES (NULL,
  -5, 200, -300, 60000, -70000, 16000000, -2000000000, 4000000000,
  -9000000000000000000, 18446744073709551615,
  '-12345678901234567890123456789012345.123456789012345678901234567890', '-12.34', '-12345678901234567890',
  3.14159, -2.718281828459045,
  '2024-02-29',
  '-838:59:59', '-00:00:01.5', '-00:00:01.500000',
  '2024-02-29 23:59:59', '9999-12-31 23:59:59.99', '2024-02-29 23:59:59.999999',
  '2038-01-19 03:14:07', '1970-01-01 00:00:01.000001',
  2024,
  '漢字😀', 'héllo wörld 你好 🚀🎉 ñ', 'テキスト 😀 text', 'café é',
  X'0102030000000000', X'DEADBEEF00',
  X'00', X'0001020304FF', REPEAT(X'ABCD', 300), X'00FF00FF',
  'medium', 'red,blue',
  b'1', b'101', b'1111111111111111111111111111111111111111111111111111111111111111',
  '{"a": 1, "b": [true, false, null], "c": {"d": "é😀"}, "n": 1.5e300}',
  ST_GeomFromText('POINT(1.5 -2.25)', 4326), ST_GeomFromText('POINT(10 20)'),
  '123e4567-e89b-12d3-a456-426614174000', '2001:db8::1');

-- row 2: maximum values
INSERT INTO t_types (ti,tiu,si,siu,mi,miu,i,iu,bi,biu,dec65,dec10,dec0,f,d,dt,tm0,tm3,tm6,dtm0,dtm2,dtm6,ts0,ts6,yr,
  c,vc,txt,vlat,bin8,vbin,tblb,blb,mblb,lblb,e,st,b1,b3,b64,j,g,pt,uid,ip)
VALUES (127,255,32767,65535,8388607,16777215,2147483647,4294967295,9223372036854775807,18446744073709551615,
  '99999999999999999999999999999999999.999999999999999999999999999999','99999999.99','99999999999999999999',
  3.4e38, 1.7976931348623157e308,
  '9999-12-31', '838:59:59', '838:59:59.999', '838:59:59.999999',
  '9999-12-31 23:59:59', '9999-12-31 23:59:59.99', '9999-12-31 23:59:59.999999',
  '2038-01-19 03:14:07', '2038-01-19 03:14:07.999999',
  2155,
  'ten chars!', REPEAT('x', 300), REPEAT('長', 1000), 'ÿÿÿ',
  X'FFFFFFFFFFFFFFFF', X'FF', X'FF', X'FF', X'FF', X'FF',
  'large', 'red,green,blue',
  b'1', b'111', b'1111111111111111111111111111111111111111111111111111111111111111',
  '[1, 2.5, "three", {"four": [4]}]',
  ST_GeomFromText('LINESTRING(0 0, 1 1, 2 2.5)', 3857), ST_GeomFromText('POINT(-180 -90)'),
  'ffffffff-ffff-ffff-ffff-ffffffffffff', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff');

-- row 3: minimum values, zeros, empty strings
INSERT INTO t_types (ti,tiu,si,siu,mi,miu,i,iu,bi,biu,dec65,dec10,dec0,f,d,dt,tm0,tm3,tm6,dtm0,dtm2,dtm6,ts0,ts6,yr,
  c,vc,txt,vlat,bin8,vbin,tblb,blb,mblb,lblb,e,st,b1,b3,b64,j,g,pt,uid,ip)
VALUES (-128,0,-32768,0,-8388608,0,-2147483648,0,-9223372036854775808,0,
  '-0.000000000000000000000000000001','0.00','0',
  -1.5e-38, -2.2250738585072014e-308,
  '1000-01-01', '-838:59:59', '-838:59:59.999', '-00:00:00.000001',
  '1000-01-01 00:00:00', '1000-01-01 00:00:00.01', '1000-01-01 00:00:00.000001',
  '1970-01-01 00:00:01', '1970-01-01 00:00:01.000001',
  1901,
  '', '', '', '',
  X'0000000000000000', X'', X'', X'', X'', X'',
  'small', '',
  b'0', b'000', b'0',
  '"just a string"',
  ST_GeomFromText('POLYGON((0 0, 10 0, 10 10, 0 10, 0 0), (2 2, 3 2, 3 3, 2 2))', 4326), ST_GeomFromText('POINT(0 0)'),
  '00000000-0000-0000-0000-000000000001', '::');

-- row 4: NULL in every nullable column
INSERT INTO t_types (id) VALUES (NULL);

-- row 5: negative decimals and zero, DECIMAL(20,0) extreme negative, small TIME fractions
INSERT INTO t_types (dec65, dec10, dec0, tm3, tm6, f, d) VALUES
  ('-0.5', '-0.01', '-99999999999999999999', '-00:00:00.5', '-00:00:00.000500', 0, -0);

-- row 6: zero dates (needs a sql_mode without NO_ZERO_DATE / NO_ZERO_IN_DATE / strict)
SET SESSION sql_mode = '';
INSERT INTO t_types (dt, dtm0, dtm2, dtm6, ts0, ts6, yr) VALUES
  ('0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00.00', '0000-00-00 00:00:00.000000',
   '0000-00-00 00:00:00', '0000-00-00 00:00:00.000000', 0);
SET SESSION sql_mode = DEFAULT;

SET TIMESTAMP = 1700000100;
UPDATE t_types SET vc = 'updated ✓', j = JSON_SET(j, '$.a', 2), biu = 0, b64 = b'1',
  g = ST_GeomFromText('LINESTRING(0 0, 1 1, 2 2)', 4326), bin8 = X'AA00000000000000' WHERE id = 1;
UPDATE t_types SET ti = ti DIV 2, si = si DIV 2, tm6 = '-00:00:01.5' WHERE id IN (2, 3);
UPDATE t_types SET ti = 1, c = 'was null' WHERE id = 4;
INSERT INTO t_types (ti, vc, j, bin8, b64, g) VALUES (99, 'to be deleted 😀', '{"x": null}', X'FF', b'101',
  ST_GeomFromText('POINT(3 4)', 4326));
DELETE FROM t_types WHERE id = 7;

-- ---------------------------------------------------------------- a big blob (> 70000 bytes) in its own table
CREATE TABLE t_blobs (
  id INT PRIMARY KEY,
  note VARCHAR(40) NOT NULL,
  tb TINYBLOB NULL, b BLOB NULL, mb MEDIUMBLOB NULL, lb LONGBLOB NULL
) ENGINE=InnoDB;
INSERT INTO t_blobs VALUES (1, 'big', X'01', REPEAT(X'02', 65535), REPEAT(X'0300', 150), REPEAT(X'00FF10', 23334));
INSERT INTO t_blobs VALUES (2, 'small', NULL, X'', X'05', NULL);

-- ---------------------------------------------------------------- table without a primary key, duplicates
CREATE TABLE t_nopk (a INT NULL, b VARCHAR(10) NULL, c DOUBLE NULL) ENGINE=InnoDB;
INSERT INTO t_nopk VALUES (1,'dup',1.0),(1,'dup',1.0),(2,'two',NULL),(NULL,NULL,NULL),(3,'three',3.5);
UPDATE t_nopk SET b = 'one' WHERE a = 1 LIMIT 1;
DELETE FROM t_nopk WHERE a = 2;
DELETE FROM t_nopk WHERE a IS NULL;

-- ---------------------------------------------------------------- multi-statement transaction
CREATE TABLE t_accounts (id INT PRIMARY KEY, owner VARCHAR(40) NOT NULL, balance DECIMAL(12,2) NOT NULL) ENGINE=InnoDB;
INSERT INTO t_accounts VALUES (1,'alice',100.00),(2,'bob',50.00),(3,'carol',0.00);
SET TIMESTAMP = 1700000200;
START TRANSACTION;
UPDATE t_accounts SET balance = balance - 30.25 WHERE id = 1;
UPDATE t_accounts SET balance = balance + 30.25 WHERE id = 2;
INSERT INTO t_accounts VALUES (4,'dave',1.50);
UPDATE t_accounts SET owner = 'dave jr' WHERE id = 4;
DELETE FROM t_accounts WHERE id = 3;
INSERT INTO t_nopk VALUES (9, 'in-txn', 9.0);
COMMIT;

-- rolled-back transaction: must not appear in the binlog
START TRANSACTION;
INSERT INTO t_accounts VALUES (99,'ROLLED_BACK',999.99);
UPDATE t_accounts SET owner = 'ROLLED_BACK' WHERE id = 1;
ROLLBACK;

-- ---------------------------------------------------------------- binlog_row_image=MINIMAL
SET SESSION binlog_row_image = 'MINIMAL';
SET TIMESTAMP = 1700000300;
UPDATE t_types SET vc = 'minimal ✓', tm3 = '-00:00:01.5' WHERE id = 1;
UPDATE t_types SET dec65 = '-1.000000000000000000000000000001', biu = 18446744073709551615 WHERE id = 2;
INSERT INTO t_types (ti, vc, dt) VALUES (8, 'inserted under MINIMAL', '2001-02-03');
INSERT INTO t_types (ti, vc, tm6, b3) VALUES (9, 'deleted under MINIMAL', '-00:00:01.5', b'010');
DELETE FROM t_types WHERE id = 9;
UPDATE t_nopk SET c = 4.25 WHERE a = 3;
DELETE FROM t_nopk WHERE a = 9;
UPDATE t_accounts SET balance = 0.01 WHERE id = 4;

-- ---------------------------------------------------------------- binlog_row_image=NOBLOB
SET SESSION binlog_row_image = 'NOBLOB';
SET TIMESTAMP = 1700000400;
UPDATE t_blobs SET note = 'big, noblob' WHERE id = 1;
UPDATE t_blobs SET b = X'0BB0' WHERE id = 2;
UPDATE t_types SET i = 42, txt = 'text changed under NOBLOB' WHERE id = 4;
INSERT INTO t_blobs VALUES (3, 'noblob insert', X'03', X'0303', NULL, X'030303');
DELETE FROM t_blobs WHERE id = 2;
SET SESSION binlog_row_image = 'FULL';

-- ---------------------------------------------------------------- DDL mid-stream, between row events of one table
SET TIMESTAMP = 1700000500;
CREATE TABLE t_alter (id INT PRIMARY KEY, a VARCHAR(10) NULL, z INT NULL) ENGINE=InnoDB;
INSERT INTO t_alter VALUES (1,'before',10),(2,'before2',20);
ALTER TABLE t_alter ADD COLUMN mid DATETIME(3) NULL DEFAULT '2020-01-01 00:00:00.123' AFTER a;
INSERT INTO t_alter VALUES (3,'after','2021-05-05 05:05:05.555',30);
UPDATE t_alter SET z = z + 1 WHERE id = 1;
ALTER TABLE t_alter DROP COLUMN a;
INSERT INTO t_alter VALUES (4, NULL, 40);
ALTER TABLE t_alter ADD COLUMN label VARCHAR(10) CHARACTER SET latin1 NULL FIRST;
UPDATE t_alter SET label = 'é' WHERE id = 2;
ALTER TABLE t_alter MODIFY COLUMN label VARCHAR(300) CHARACTER SET utf8mb4 NULL;
UPDATE t_alter SET label = CONCAT(label, ' 😀') WHERE id = 2;
DELETE FROM t_alter WHERE id = 3;

-- non-transactional engine: GTID + QUERY BEGIN ... QUERY COMMIT, no XID
CREATE TABLE t_myisam (id INT PRIMARY KEY, v VARCHAR(10) NULL) ENGINE=MyISAM;
INSERT INTO t_myisam VALUES (1,'m1'),(2,'m2');
UPDATE t_myisam SET v = CONCAT(v, '!');

-- ---------------------------------------------------------------- compressed events (165-168) in a new binlog file
FLUSH BINARY LOGS;
SET GLOBAL log_bin_compress = ON, log_bin_compress_min_len = 10;
-- @reconnect
SET SESSION time_zone = '+00:00';
SET TIMESTAMP = 1700000600;
USE sluice_it;
CREATE TABLE t_compressed (id INT PRIMARY KEY, payload VARCHAR(200) NOT NULL, n BIGINT UNSIGNED NULL) ENGINE=InnoDB;
INSERT INTO t_compressed VALUES (1, REPEAT('compress me ', 10), 18446744073709551615), (2, 'two', NULL), (3, 'three', 3);
UPDATE t_compressed SET payload = CONCAT(payload, ' updated') WHERE id <= 2;
DELETE FROM t_compressed WHERE id = 3;
UPDATE t_types SET vc = 'compressed ✓', d = 0.1 WHERE id = 1;
SET SESSION binlog_row_image = 'MINIMAL';
UPDATE t_compressed SET n = 7 WHERE id = 2;
SET SESSION binlog_row_image = 'FULL';
ALTER TABLE t_compressed ADD COLUMN extra TINYINT NULL AFTER id;
INSERT INTO t_compressed VALUES (4, -1, 'after alter', 4);
SET GLOBAL log_bin_compress = OFF;
-- @reconnect
SET SESSION time_zone = '+00:00';
SET TIMESTAMP = 1700000700;
USE sluice_it;

CREATE TABLE t_done (id INT PRIMARY KEY) ENGINE=InnoDB;
INSERT INTO t_done VALUES (1);
FLUSH BINARY LOGS;
