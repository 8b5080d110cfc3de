-- The workload of the publisher's server-free pipeline tests (crates/publisher/src/pipeline/tests.rs),
-- recorded by integration/record_pipeline_binlog.sh. Each transaction is one case the tests name.
CREATE DATABASE shop CHARACTER SET utf8mb4;
CREATE TABLE shop.orders (id INT PRIMARY KEY, status VARCHAR(20) NOT NULL, total DECIMAL(10,2) NOT NULL) ENGINE=InnoDB;
CREATE TABLE shop.notes (id INT PRIMARY KEY, body TEXT NOT NULL) ENGINE=InnoDB;
CREATE TABLE shop.audit (id INT PRIMARY KEY, what VARCHAR(40)) ENGINE=InnoDB;
-- three rows in one transaction
BEGIN;
INSERT INTO shop.orders VALUES (1, 'new', 10.00), (2, 'new', 20.00), (3, 'new', 30.00);
COMMIT;
-- two tables in one transaction
BEGIN;
UPDATE shop.orders SET status = 'paid' WHERE id = 1;
INSERT INTO shop.notes VALUES (1, 'order 1 paid');
COMMIT;
-- a key change: a delete of key 2 and a create of key 20
UPDATE shop.orders SET id = 20 WHERE id = 2;
-- a delete
DELETE FROM shop.orders WHERE id = 3;
-- a table the tests' filter leaves out
INSERT INTO shop.audit VALUES (1, 'not captured');
-- one transaction of 500 rows
INSERT INTO shop.notes WITH RECURSIVE s(n) AS (SELECT 2 UNION ALL SELECT n + 1 FROM s WHERE n < 501)
    SELECT n, REPEAT('x', 100) FROM s;
-- a last small one after it
UPDATE shop.orders SET total = 11.50 WHERE id = 1;
FLUSH BINARY LOGS;
