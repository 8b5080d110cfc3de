pub mod mariadb;
